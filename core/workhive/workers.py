"""``Workers``: the worker registry (``hive.workers``)."""

from __future__ import annotations

import builtins
from typing import TYPE_CHECKING, Any

import attrs

from workhive.errors import InvalidArgument, WorkerNotFound
from workhive.models import ReapedWorker, WorkerFilter, WorkerRecord, WorkerRegistration, WorkerStatus
from workhive.redaction import contains_secret, scrub
from workhive.validation import check_name, check_positive, check_text, printable_text

if TYPE_CHECKING:
    from workhive.hive import Hive

__all__ = ["Workers"]


class Workers:
    """Register workers, beat their hearts, and reap the ones that went silent.

    >>> async def main(hive):  # doctest: +SKIP
    ...     me = await hive.workers.register(pools=["summaries"])
    ...     await hive.workers.heartbeat(me.worker_id)   # also extends my leases
    ...     lost = await hive.workers.reap()              # others' silent workers
    """

    def __init__(self, hive: Hive) -> None:
        self._hive = hive
        self._backend = hive.storage

    async def register(self, registration: WorkerRegistration | None = None, **fields: Any) -> WorkerRecord:
        """Register (or re-register) a worker; fields as in ``WorkerRegistration``."""
        reg = registration if registration is not None else WorkerRegistration(**fields)
        check_name("worker", reg.worker_id)
        for pool in reg.pools:
            check_name("pool", pool)
        if not isinstance(reg.host, str):
            raise InvalidArgument(f"host must be a string, got {reg.host!r}", value=reg.host)
        check_text("host", reg.host)
        for capability in reg.capabilities:
            if not isinstance(capability, str):
                raise InvalidArgument(f"capabilities are strings, got {capability!r}", value=capability)
            check_text("capability", capability)
        if any(contains_secret(c) for c in reg.capabilities):
            # Free text, stored and shown (`workhive workers --json`, the dashboard): no secret goes in.
            # (mypy's attrs plugin mistypes a field with converter=tuple, hence the ignore)
            reg = attrs.evolve(reg, capabilities=tuple(scrub(c) for c in reg.capabilities))  # type: ignore[misc]
        return await self._backend.register_worker(reg)

    async def heartbeat(self, worker_id: str) -> WorkerRecord:
        """Say "still alive"; extends every lease the worker holds. ``WorkerLost`` if it was reaped."""
        return await self._backend.heartbeat(worker_id)

    async def update_status(self, worker_id: str, status: WorkerStatus | str, detail: str | None = None) -> None:
        """Record what the worker is doing (idle, busy, paused, stopping…).

        ``detail`` is kept as printable text: a lone surrogate (text that is not
        valid Unicode, often from an exception) is kept as its escape, and every
        secret the process holds is scrubbed out (``workhive.redaction``).
        """
        try:
            state = WorkerStatus(status)
        except ValueError:
            allowed = ", ".join(s.value for s in WorkerStatus if s is not WorkerStatus.LOST)
            raise InvalidArgument(f"unknown worker status {status!r}; use one of {allowed}", value=status) from None
        if detail is not None:
            if not isinstance(detail, str):
                raise InvalidArgument(f"detail must be a string or None, got {detail!r}", value=detail)
            detail = scrub(printable_text(detail))
        await self._backend.set_worker_status(worker_id, state, detail)

    async def get(self, worker_id: str) -> WorkerRecord:
        """The worker's record; ``WorkerNotFound`` if it never registered."""
        record = await self._backend.get_worker(worker_id)
        if record is None:
            raise WorkerNotFound(f"no worker {worker_id!r} is registered", worker_id=worker_id)
        return record

    async def list(self, filter: WorkerFilter | None = None, **fields: Any) -> list[WorkerRecord]:
        """Workers matching ``filter`` (or the fields of a ``WorkerFilter``), oldest registration first."""
        return await self._backend.list_workers(filter if filter is not None else WorkerFilter(**fields))

    async def deregister(self, worker_id: str) -> int:
        """Clean shutdown: give back what the worker still holds (attempts refunded), mark it STOPPED."""
        released = await self._backend.release_by_worker(None, worker_id, False)
        await self._backend.set_worker_status(worker_id, WorkerStatus.STOPPED, None)
        return released

    async def reap(self, threshold: float | None = None) -> builtins.list[ReapedWorker]:
        """Declare workers silent for ``threshold`` seconds lost and release their items in every pool."""
        limit = self._hive.reap_after if threshold is None else check_positive("threshold", threshold)
        reaped = await self._backend.reap(limit)
        if reaped and self._hive.manager.event_hooks["workhive_worker_lost"]:
            for worker in reaped:
                self._hive.manager.hook.workhive_worker_lost(worker=worker)
        return reaped
