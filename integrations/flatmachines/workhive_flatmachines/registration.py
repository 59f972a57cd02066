"""flatmachines' ``RegistrationBackend`` on a workhive hive's worker registry.

The registry is workhive's (so ``workhive workers`` and ``workhive reap`` see
flatmachines workers); what it has no field for — heartbeat ``metadata`` and
the ``started_at`` a worker reported — is kept beside it in the hive's shared
state, under the namespace ``flatmachines.workers``.
"""

from __future__ import annotations

import builtins
import json
import re
from typing import Any

from flatmachines.distributed import WorkerFilter as FmWorkerFilter
from flatmachines.distributed import WorkerRecord as FmWorkerRecord
from flatmachines.distributed import WorkerRegistration as FmWorkerRegistration

import workhive
from workhive.errors import InvalidItem, WorkerNotFound
from workhive.validation import check_positive, to_json
from workhive_flatmachines.connection import HiveHandle, open_handle
from workhive_flatmachines.convert import flatmachines_status, iso, statuses_for_filter, workhive_status
from workhive_flatmachines.errors import NotJSON

__all__ = ["SIDE_NAMESPACE", "WorkhiveRegistrationBackend", "capability_matches"]

#: shared-state namespace for what workhive's registry has no field for
SIDE_NAMESPACE = "flatmachines.workers"


def _record(record: workhive.WorkerRecord, side: dict[str, Any] | None) -> FmWorkerRecord:
    side = side or {}
    return FmWorkerRecord(
        worker_id=record.worker_id,
        status=flatmachines_status(record.status),
        last_heartbeat=iso(record.last_heartbeat) or "",
        # Stored as "" and 0 when flatmachines gave none: workhive's registry requires both.
        host=record.host or None,
        pid=record.pid or None,
        capabilities=list(record.capabilities) or None,
        started_at=side.get("started_at") or iso(record.registered_at),
        current_task_id=side.get("current_task_id"),
        metadata=side.get("metadata"),
    )


def _like(pattern: str) -> re.Pattern[str]:
    """SQLite's ``LIKE`` as a regex: ``_`` is any one character, ``%`` any run, ASCII letters fold case."""
    parts = [".*" if ch == "%" else "." if ch == "_" else re.escape(ch) for ch in pattern]
    return re.compile("".join(parts), re.ASCII | re.IGNORECASE | re.DOTALL)


def capability_matches(wanted: str, capabilities: tuple[str, ...] | list[str]) -> bool:
    """Whether a worker with ``capabilities`` passes flatmachines' ``WorkerFilter(capability=wanted)``.

    flatmachines' two backends disagree, and both are kept: its memory backend
    wants exact membership; its SQLite backend runs
    ``capabilities LIKE '%"<wanted>"%'`` on the list's JSON text, so ``_`` in
    the filter matches any one character (``"gpu_small"`` finds
    ``"gpu-small"``), ``%`` any run of them, and ASCII case is ignored.

    >>> capability_matches("gpu_small", ["gpu-small"]), capability_matches("gpu", ["gpu-small"])
    (True, False)
    """
    if wanted in capabilities:
        return True
    if not capabilities:
        return False
    # json.dumps as flatmachines' SQLite backend stores the list (default separators, ASCII escapes).
    return _like('%"' + wanted + '"%').fullmatch(json.dumps(list(capabilities))) is not None


def _not_found(worker_id: str) -> KeyError:
    return KeyError(f"Worker {worker_id!r} not found: it never registered (register_worker first)")


class WorkhiveRegistrationBackend:
    """flatmachines' ``RegistrationBackend`` over a workhive storage URL (or a ``Hive`` you own).

    >>> registry = WorkhiveRegistrationBackend("sqlite:///data/workers.db")  # doctest: +SKIP
    >>> await registry.register(WorkerRegistration(worker_id="w1", capabilities=["gpu"]))  # doctest: +SKIP
    >>> await registry.heartbeat("w1", {"load": 0.3})  # doctest: +SKIP
    """

    def __init__(self, storage: str | workhive.Hive | HiveHandle | None = None, **options: Any) -> None:
        self.handle = open_handle(storage, options)

    def __repr__(self) -> str:
        return f"<WorkhiveRegistrationBackend {self.handle!r}>"

    async def _side(self) -> workhive.SharedState:
        return (await self.handle.hive()).shared(SIDE_NAMESPACE)

    async def register(self, worker: FmWorkerRegistration) -> FmWorkerRecord:
        """Register (or re-register, which clears its metadata) a worker; it reads back as "active"."""
        hive = await self.handle.hive()
        caps = worker.capabilities or ()
        if isinstance(caps, str) or not all(isinstance(c, str) for c in caps):
            raise workhive.InvalidArgument(f"capabilities must be a list of strings, got {caps!r}", value=caps)
        if worker.pid is not None and (worker.pid.__class__ is not int or worker.pid < 0):
            raise workhive.InvalidArgument(f"pid must be an int >= 0 or None, got {worker.pid!r}", value=worker.pid)
        if worker.host is not None and not isinstance(worker.host, str):
            raise workhive.InvalidArgument(f"host must be a string or None, got {worker.host!r}", value=worker.host)
        started_at = worker.started_at
        if started_at is not None and not isinstance(started_at, str):
            raise workhive.InvalidArgument(f"started_at must be an ISO-8601 string or None, got {started_at!r}")
        record = await hive.workers.register(
            worker_id=worker.worker_id, host=worker.host or "", pid=worker.pid or 0, capabilities=tuple(caps)
        )
        side = {"started_at": started_at, "metadata": None, "current_task_id": None}
        await (await self._side()).put(worker.worker_id, side)
        return _record(record, side)

    async def heartbeat(self, worker_id: str, metadata: dict[str, Any] | None = None) -> None:
        """Record that the worker is alive (merging ``metadata``); ``KeyError`` if unknown, ``WorkerLost`` if reaped."""
        if metadata:
            if not isinstance(metadata, dict):
                raise workhive.InvalidArgument(f"metadata must be a dict, got {type(metadata).__name__}")
            try:
                to_json(metadata, "worker metadata")  # refused before anything is written
            except InvalidItem as exc:
                raise NotJSON(str(exc)) from exc
        hive = await self.handle.hive()
        try:
            await hive.workers.heartbeat(worker_id)
        except WorkerNotFound:
            raise _not_found(worker_id) from None
        if metadata:
            side_state = await self._side()
            side = await side_state.get(worker_id) or {}
            side["metadata"] = {**(side.get("metadata") or {}), **metadata}
            await side_state.put(worker_id, side)

    async def set_current_task(self, worker_id: str, task_id: str | None) -> None:
        """Record the job a registered worker is on (None: none); a worker that never registered is left alone."""
        side_state = await self._side()
        side = await side_state.get(worker_id)
        if side is not None and side.get("current_task_id") != task_id:
            side["current_task_id"] = task_id
            await side_state.put(worker_id, side)

    async def update_status(self, worker_id: str, status: str) -> None:
        """Set a flatmachines status (active, terminating, terminated, lost); workhive's names work too."""
        state = workhive_status(status)
        hive = await self.handle.hive()
        try:
            await hive.workers.update_status(worker_id, state)
        except WorkerNotFound:
            raise _not_found(worker_id) from None

    async def get(self, worker_id: str) -> FmWorkerRecord | None:
        """The worker's record, or None if it never registered."""
        hive = await self.handle.hive()
        try:
            record = await hive.workers.get(worker_id)
        except WorkerNotFound:
            return None
        return _record(record, await (await self._side()).get(worker_id))

    async def list(self, filter: FmWorkerFilter | None = None) -> builtins.list[FmWorkerRecord]:
        """Workers matching ``filter``: status, capability, and heartbeat older than ``stale_threshold_seconds``."""
        hive = await self.handle.hive()
        fields: dict[str, Any] = {}
        capability = None
        if filter is not None:
            if filter.status:
                fields["statuses"] = statuses_for_filter(filter.status)
            if filter.stale_threshold_seconds:
                fields["stale_for"] = check_positive("stale_threshold_seconds", filter.stale_threshold_seconds)
            capability = filter.capability or None
        records = await hive.workers.list(**fields)
        if capability is not None:
            records = [r for r in records if capability_matches(capability, r.capabilities)]
        sides = await (await self._side()).items() if records else {}
        return [_record(r, sides.get(r.worker_id)) for r in records]
