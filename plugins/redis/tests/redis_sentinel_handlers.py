"""The handler the Sentinel failover test's fleet runs (imported by worker processes through PYTHONPATH)."""

from __future__ import annotations

import os
import time
from typing import Any


def logged(ctx: Any) -> dict[str, Any]:
    """Writes 'item-id token time' for every execution, then returns the claim's fencing token.

    One short O_APPEND write per line: lines from several processes never
    interleave, and the test counts them to see progress and duplicates.
    """
    line = f"{ctx.item.id} {ctx.item.token} {time.time():.6f}\n"
    fd = os.open(os.environ["WORKHIVE_SENTINEL_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    # Keeps the drain going long enough for the kill to land mid-run.
    time.sleep(float(os.environ.get("WORKHIVE_SENTINEL_SLEEP", "0")))
    return {"token": ctx.item.token}
