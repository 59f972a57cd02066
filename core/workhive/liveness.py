"""Is a worker's process still there? Answerable at once for workers on this host.

A worker's heartbeat tells every host, after ``reap_after`` seconds, that it is
gone. On the host it ran on, its PID says so at once: ``status`` and
``workers`` show such a worker as ``dead`` (not ``active`` for a minute), and a
supervisor on that host reaps it without waiting for the threshold.

A PID that was reused by another process reads as alive: the heartbeat
threshold still catches that worker, so the check never reaps a live one
(short of two hosts sharing one hostname and one store, which this assumes
they do not).

>>> import os, socket
>>> process_gone(socket.gethostname(), os.getpid())
False
"""

from __future__ import annotations

import os
import socket
from collections.abc import Collection
from typing import TYPE_CHECKING

from workhive.models import ReapedWorker, WorkerStatus

if TYPE_CHECKING:
    from workhive.hive import Hive

__all__ = ["process_gone", "reap_gone"]

_LIVE = frozenset(
    {WorkerStatus.STARTING, WorkerStatus.IDLE, WorkerStatus.BUSY, WorkerStatus.PAUSED, WorkerStatus.STOPPING}
)

_HOST = socket.gethostname()


def process_gone(host: str, pid: int) -> bool:
    """True only when ``host`` is this host and no process ``pid`` exists here."""
    if host != _HOST or not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OSError):
        return False  # it exists (another user's), or we cannot tell: not gone
    return False


async def reap_gone(hive: Hive, *, exclude_pids: Collection[int] = ()) -> list[ReapedWorker]:
    """Declare lost, at once, the registered workers whose process on this host is gone.

    Their items are released as ``reap`` releases them (the attempt stays spent; an item
    out of attempts is poisoned by the backend). ``exclude_pids``: processes the caller
    handles itself (a supervisor's own children).
    """
    reaped = []
    for record in await hive.workers.list(statuses=_LIVE):
        if record.pid in exclude_pids or not process_gone(record.host, record.pid):
            continue
        await hive.storage.set_worker_status(
            record.worker_id, WorkerStatus.LOST, f"its process {record.pid} on {record.host} is gone"
        )
        released = await hive.storage.release_by_worker(None, record.worker_id, True)
        reaped.append(ReapedWorker(record.worker_id, record.last_heartbeat, released, 0))
    return reaped
