"""Handlers of bench/waiting.py: a simulated LLM call (``asyncio.sleep``) and a no-op, for workhive and arq."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

#: seconds a simulated call waits on its provider
SLEEP = float(os.environ.get("BENCH_SLEEP", "10"))
#: where each process notes when its first call started (the fleet's start-up ends there)
STARTS = os.environ.get("BENCH_STARTS_DIR")
_started = False


def _note_start() -> None:
    global _started
    _started = True
    if STARTS:
        with open(os.path.join(STARTS, str(os.getpid())), "w") as f:
            f.write(repr(time.time()))


async def wait(ctx: Any) -> None:
    if not _started:
        _note_start()
    await asyncio.sleep(SLEEP)


async def noop(ctx: Any) -> None:
    if not _started:
        _note_start()


async def arq_wait(ctx: Any) -> None:
    await asyncio.sleep(SLEEP)
