"""Handlers of bench/waiting.py: a simulated LLM call (``asyncio.sleep``) and a no-op, for workhive and arq."""

from __future__ import annotations

import asyncio
import os
from typing import Any

#: seconds a simulated call waits on its provider
SLEEP = float(os.environ.get("BENCH_SLEEP", "10"))


async def wait(ctx: Any) -> None:
    await asyncio.sleep(SLEEP)


async def noop(ctx: Any) -> None:
    return None


async def arq_wait(ctx: Any) -> None:
    await asyncio.sleep(SLEEP)
