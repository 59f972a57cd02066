"""Handlers for bench/fairness.py: each records when it started and ended, and for which tenant.

Worker processes append ``<time> <+|-> <tenant>`` lines to ``BENCH_FAIRNESS_LOG``
with one ``write`` on an ``O_APPEND`` descriptor each (atomic for a short
line), so the bench can rebuild, across processes, the completion times and the
largest number of items of a tenant in flight at once.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

_fd: int | None = None
_opening = threading.Lock()


def _log(kind: str, tenant: str) -> None:
    global _fd
    if _fd is None:
        with _opening:
            if _fd is None:
                _fd = os.open(os.environ["BENCH_FAIRNESS_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(_fd, f"{time.time():.6f} {kind} {tenant}\n".encode())


def noop(ctx: Any) -> None:
    tenant = ctx.data["t"]
    _log("+", tenant)
    _log("-", tenant)


def sleep5(ctx: Any) -> None:
    """A 5 ms call (an API round trip's worth of waiting, in a thread like a sync SDK's)."""
    tenant = ctx.data["t"]
    _log("+", tenant)
    time.sleep(0.005)
    _log("-", tenant)
