"""Handlers the fleet matrix runs (imported by worker processes through PYTHONPATH)."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any


def _log(line: str) -> None:
    # One short O_APPEND write per line: lines from many processes never interleave,
    # and their order in the file is the order the writes happened.
    fd = os.open(os.environ["WORKHIVE_FLEET_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


async def _meet(processes: int) -> None:
    """Wait (up to 2 minutes) until ``processes`` worker processes have arrived, so they contend for real."""
    here = os.environ["WORKHIVE_FLEET_LOG"] + ".pids"
    os.makedirs(here, exist_ok=True)
    os.close(os.open(os.path.join(here, str(os.getpid())), os.O_CREAT | os.O_WRONLY, 0o644))
    deadline = time.monotonic() + 120
    # Other processes arrive as files: there is no in-process event to wait on.
    while len(os.listdir(here)) < processes and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.01)


async def locked(ctx: Any) -> dict[str, Any]:
    """Holds the fleet-wide lock ``shared`` around a logged critical section; returns both fencing tokens.

    The first items wait for every worker process to arrive, so the lock is
    always contended across processes, however the claims happen to fall.
    """
    await _meet(int(ctx.data.get("meet", 1)))
    async with ctx.lock("shared", ttl=60) as held:
        _log(f"enter {held.token} {os.getpid()} {ctx.item.id}")
        await asyncio.sleep(float(os.environ.get("WORKHIVE_FLEET_SLEEP", "0")))
        _log(f"exit {held.token} {os.getpid()} {ctx.item.id}")
    return {"token": ctx.item.token, "lock_token": held.token, "pid": os.getpid()}


def tokened(ctx: Any) -> dict[str, Any]:
    """Returns the claim's fencing token, so a test can tell which claim's completion won."""
    time.sleep(float(os.environ.get("WORKHIVE_FLEET_SLEEP", "0")))
    return {"token": ctx.item.token, "pid": os.getpid()}
