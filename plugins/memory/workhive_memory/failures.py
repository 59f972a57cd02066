"""What the memory engine's refusals say: the errors it raises, each naming what to do.

The memory engine has no driver, so nothing fails underneath it; what it refuses
is a hive that does not exist in this process, a worker it does not know, and a
worker it has declared lost. Every engine keeps these messages in its
``failures.py`` (the others also turn driver errors into workhive errors).

>>> unknown_worker("w1").worker_id
'w1'
"""

from __future__ import annotations

from workhive.errors import HiveNotFound, WorkerLost, WorkerNotFound

__all__ = ["lost_worker", "missing_hive", "unknown_worker"]


def missing_hive(url: str, name: str | None) -> HiveNotFound:
    """``create=False`` on a store this process never made: nothing is created."""
    why = (
        ": memory:// is a new private store every time, so there is nothing to read; "
        "use memory://NAME of a store this process has written to"
        if name is None
        else "; push to it first (memory stores live only as long as the process)"
    )
    return HiveNotFound(f"no memory hive {url!r} exists in this process{why}", url=url)


def unknown_worker(worker_id: str) -> WorkerNotFound:
    return WorkerNotFound(
        f"no worker {worker_id!r} is registered; register it before heartbeating or setting its status",
        worker_id=worker_id,
    )


def lost_worker(worker_id: str, last_heartbeat: float) -> WorkerLost:
    return WorkerLost(
        f"worker {worker_id!r} was declared lost (no heartbeat since {last_heartbeat}) and its "
        "items were released; stop working on them and register again",
        worker_id=worker_id,
    )
