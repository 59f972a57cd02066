"""The worker loops the benches time through workhive's API, written once for every engine's bench."""

from __future__ import annotations

from typing import Any

__all__ = ["claim_complete_loop"]


async def claim_complete_loop(pool: Any, worker: str, result: Any, fused: bool) -> int:
    """Claim and complete items one at a time until ``pool`` is empty; how many were done.

    ``fused``: each completion claims the next item in the same call
    (``complete_and_claim``), else ``complete`` then ``claim``.
    """
    done = 0
    item = await pool.claim(worker)
    while item is not None:
        if fused:
            item = await pool.complete_and_claim(item, result, worker)
        else:
            await pool.complete(item, result)
            item = await pool.claim(worker)
        done += 1
    return done
