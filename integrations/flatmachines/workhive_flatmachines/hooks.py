"""``WorkhiveWorkerHooks``: flatmachines' ``DistributedWorkerHooks``, configured by a storage URL.

A machine selects it from its YAML, with no code of its own::

    hooks:
      module: workhive_flatmachines
      class: WorkhiveWorkerHooks
      args:
        storage: "sqlite:///data/workers.db"
        lease: 120

Every action of ``DistributedWorkerHooks`` (claim_job, complete_job,
fail_job, register_worker, heartbeat, list_stale_workers, reap_worker, …)
then runs on that hive. Subclass it to add your own job actions, as with
``DistributedWorkerHooks``.
"""

from __future__ import annotations

from typing import Any

from flatmachines.distributed_hooks import DistributedWorkerHooks

import workhive
from workhive_flatmachines.connection import HiveHandle
from workhive_flatmachines.registration import WorkhiveRegistrationBackend
from workhive_flatmachines.work import WorkhiveWorkBackend

__all__ = ["WorkhiveWorkerHooks"]


class WorkhiveWorkerHooks(DistributedWorkerHooks):
    """``DistributedWorkerHooks`` whose registration and work backends share one workhive hive.

    ``storage``: a workhive storage URL (``sqlite:///…``, ``memory://name``,
    ``postgresql://…``, ``redis://…``) or a ``Hive``. ``lease``: seconds a
    claim lasts without a heartbeat (renewed every ``heartbeat_every`` while
    the job runs). ``max_attempts`` is the hive's default for items pushed
    through workhive itself; flatmachines' own pushes default to max_retries=3.
    ``retry_in``: seconds a failed job waits before another claim (None: the
    hive's backoff). Other keyword arguments go to the storage plugin.

    >>> hooks = WorkhiveWorkerHooks(storage="memory://jobs")
    >>> isinstance(hooks, DistributedWorkerHooks)
    True
    """

    def __init__(
        self,
        storage: str | workhive.Hive,
        *,
        lease: float = 60.0,
        heartbeat_every: float | None = None,
        retry_in: float | None = 0.0,
        **options: Any,
    ) -> None:
        if isinstance(storage, workhive.Hive):
            handle = HiveHandle(storage, heartbeat_every=heartbeat_every, **options)
        else:
            handle = HiveHandle(storage, heartbeat_every=heartbeat_every, lease=lease, **options)
        self.handle = handle
        self._workhive_registration = WorkhiveRegistrationBackend(handle)
        super().__init__(registration=self._workhive_registration, work=WorkhiveWorkBackend(handle, retry_in=retry_in))

    # The job a worker is on shows as its record's current_task_id (the claim's id),
    # for reapers and dashboards; flatmachines' own backends never set it.
    async def _claim_job(self, context: dict[str, Any]) -> dict[str, Any]:
        context = await super()._claim_job(context)
        if context.get("job_id"):
            await self._workhive_registration.set_current_task(context["worker_id"], context["job_id"])
        return context

    async def _complete_job(self, context: dict[str, Any]) -> dict[str, Any]:
        context = await super()._complete_job(context)
        await self._clear_task(context)
        return context

    async def _fail_job(self, context: dict[str, Any]) -> dict[str, Any]:
        context = await super()._fail_job(context)
        await self._clear_task(context)
        return context

    async def _clear_task(self, context: dict[str, Any]) -> None:
        worker_id = context.get("worker_id")
        if worker_id:
            await self._workhive_registration.set_current_task(worker_id, None)

    async def aclose(self) -> None:
        """Close the hive now (it also closes on its own when the event loop shuts down)."""
        await self.handle.aclose()
