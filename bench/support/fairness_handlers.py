"""Handlers for bench/fairness.py: each records when it started and ended, and for which tenant.

Worker processes append ``<time> <+|-> <tenant> <claimed at> <worker>`` lines to
``BENCH_FAIRNESS_LOG`` with one ``write`` on an ``O_APPEND`` descriptor each
(atomic for a short line), so the bench can rebuild, across processes, the
completion times, the largest number of items of a tenant in flight at once,
and which claim took each item: ``claimed at`` (hive time: the lease's expiry
less its length, the same for every item of one claim) and the worker that
claimed it name the claim, and the claims in that order are the storage's turns.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

_fd: int | None = None
_opening = threading.Lock()


def _log(kind: str, ctx: Any) -> None:
    global _fd
    if _fd is None:
        with _opening:
            if _fd is None:
                _fd = os.open(os.environ["BENCH_FAIRNESS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    item = ctx.item
    claimed_at = item.lease_expires_at - item.lease_seconds
    os.write(_fd, f"{time.time():.6f} {kind} {ctx.data['t']} {claimed_at!r} {ctx.worker_id}\n".encode())


def noop(ctx: Any) -> None:
    _log("+", ctx)
    _log("-", ctx)


def sleep5(ctx: Any) -> None:
    """A 5 ms call (an API round trip's worth of waiting, in a thread like a sync SDK's)."""
    _log("+", ctx)
    time.sleep(0.005)
    _log("-", ctx)
