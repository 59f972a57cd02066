"""``WorkhiveWorkerHooks``: flatmachines' ``DistributedWorkerHooks``, configured by a storage URL.

flatmachines 1.x loads hooks by module and class from a machine's YAML::

    hooks: {module: workhive_flatmachines, class: WorkhiveWorkerHooks}

flatmachines 4.x resolves them by name through a ``HooksRegistry``;
``register_hooks(registry)`` adds the name ``workhive`` (a state then says
``hooks: workhive``). Without a ``storage`` argument the hive is workhive's
own setting (``WORKHIVE_STORAGE``, ``workhive.toml``, or
``sqlite:///.workhive/hive.db``), the one ``workhive status`` reads.

Every action of ``DistributedWorkerHooks`` (claim_job, complete_job,
fail_job, register_worker, heartbeat, list_stale_workers, reap_worker, …)
then runs on that hive. Subclass it to add your own job actions, as with
``DistributedWorkerHooks``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from flatmachines.distributed_hooks import DistributedWorkerHooks

import workhive
from workhive_flatmachines.connection import HiveHandle, shared_handle
from workhive_flatmachines.registration import WorkhiveRegistrationBackend
from workhive_flatmachines.work import WorkhiveWorkBackend

__all__ = ["CLAIM_KEY", "HOOKS_NAME", "WorkhiveWorkerHooks", "register_hooks"]

#: context key where ``claim_job`` keeps the claim's receipt (``"<job id>.<token>"``) for fenced completion
CLAIM_KEY = "workhive_claim"

#: the name ``register_hooks`` gives the hooks in a flatmachines 4.x ``HooksRegistry``
HOOKS_NAME = "workhive"


class WorkhiveWorkerHooks(DistributedWorkerHooks):
    """``DistributedWorkerHooks`` whose registration and work backends share one workhive hive.

    ``storage``: a workhive storage URL (``sqlite:///…``, ``memory://name``,
    ``postgresql://…``, ``redis://…``), a ``Hive``, or None for workhive's own
    setting (``WORKHIVE_STORAGE``…). Hooks built from one URL in one process
    share one hive (``shared_handle``). ``lease``: seconds a claim lasts
    without a heartbeat (default workhive's, 60; renewed every
    ``heartbeat_every`` while the job runs). ``max_attempts`` is the hive's default for items pushed
    through workhive itself; flatmachines' own pushes default to max_retries=3.
    ``retry_in``: seconds a failed job waits before another claim (None: the
    hive's backoff). ``leases``: a longer lease for some pools
    (``{"pdf-render": 3600}``), for jobs that block the event loop. Other
    keyword arguments go to the storage plugin.

    >>> hooks = WorkhiveWorkerHooks(storage="memory://jobs")
    >>> isinstance(hooks, DistributedWorkerHooks)
    True
    """

    def __init__(
        self,
        storage: str | workhive.Hive | None = None,
        *,
        lease: float | None = None,
        heartbeat_every: float | None = None,
        retry_in: float | None = 0.0,
        leases: Mapping[str, float] | None = None,
        **options: Any,
    ) -> None:
        if isinstance(storage, workhive.Hive):
            handle = HiveHandle(storage, heartbeat_every=heartbeat_every, **options)
        else:
            handle = shared_handle(storage, heartbeat_every=heartbeat_every, lease=lease, **options)
        self.handle = handle
        self._workhive_registration = WorkhiveRegistrationBackend(handle)
        super().__init__(
            registration=self._workhive_registration, work=WorkhiveWorkBackend(handle, retry_in=retry_in, leases=leases)
        )

    async def on_action(self, *args: Any) -> dict[str, Any]:
        """Run an action: ``(action, context)`` as flatmachines 1.x calls it, ``(state, action, context)`` as 4.x."""
        if len(args) == 2:
            action, context = args
        elif len(args) == 3:
            _, action, context = args
        else:
            raise TypeError(
                f"on_action takes (action, context) or (state_name, action, context), got {len(args)} arguments"
            )
        return await DistributedWorkerHooks.on_action(self, *_action_args(action, context))

    # The job a worker is on shows as its record's current_task_id, for reapers and
    # dashboards; flatmachines' own backends never set it. The claim's receipt goes
    # into the context too (CLAIM_KEY): a context checkpointed and resumed in another
    # process still completes with the claim's fencing token.
    async def _claim_job(self, context: dict[str, Any]) -> dict[str, Any]:
        context = await super()._claim_job(context)
        job_id = context.get("job_id")
        if job_id:
            receipt = getattr(job_id, "receipt", None)
            if receipt is not None:
                context[CLAIM_KEY] = receipt
            await self._workhive_registration.set_current_task(context["worker_id"], str(job_id))
        return context

    async def _complete_job(self, context: dict[str, Any]) -> dict[str, Any]:
        context = await self._with_receipt(context, super()._complete_job)
        await self._clear_task(context)
        return context

    async def _fail_job(self, context: dict[str, Any]) -> dict[str, Any]:
        context = await self._with_receipt(context, super()._fail_job)
        await self._clear_task(context)
        return context

    async def _with_receipt(self, context: dict[str, Any], action: Any) -> dict[str, Any]:
        """Run ``action`` with the context's job id swapped for the claim's receipt it carries, if they match."""
        job_id, receipt = context.get("job_id"), context.pop(CLAIM_KEY, None)
        if not (isinstance(receipt, str) and isinstance(job_id, str) and receipt.split(".", 1)[0] == job_id):
            return await action(context)  # type: ignore[no-any-return]
        context["job_id"] = receipt
        try:
            context = await action(context)
        except BaseException:
            context[CLAIM_KEY] = receipt  # nothing happened: the claim is still the context's
            raise
        finally:
            context["job_id"] = job_id
        return context

    async def _clear_task(self, context: dict[str, Any]) -> None:
        worker_id = context.get("worker_id")
        if worker_id:
            await self._workhive_registration.set_current_task(worker_id, None)

    async def aclose(self) -> None:
        """Close the hive now (it also closes on its own when the event loop shuts down)."""
        await self.handle.aclose()


def _action_args(action: str, context: dict[str, Any]) -> tuple[Any, ...]:
    """The arguments ``DistributedWorkerHooks.on_action`` of the installed flatmachines takes."""
    return (action, context) if _ON_ACTION_ARITY == 2 else ("", action, context)


def _arity() -> int:
    import inspect

    return len(inspect.signature(DistributedWorkerHooks.on_action).parameters) - 1  # minus self


_ON_ACTION_ARITY = _arity()


def register_hooks(registry: Any, name: str = HOOKS_NAME, **defaults: Any) -> Any:
    """Register ``WorkhiveWorkerHooks`` under ``name`` in a flatmachines 4.x ``HooksRegistry``; returns the registry.

    ``defaults`` (``storage``, ``lease``…) apply unless a state's hooks ``args`` override them.

    >>> from flatmachines import HooksRegistry  # doctest: +SKIP
    >>> registry = register_hooks(HooksRegistry())  # doctest: +SKIP
    >>> machine = FlatMachine(config_file="worker.yml", hooks_registry=registry)  # doctest: +SKIP
    """
    if not callable(getattr(registry, "register", None)):
        raise workhive.InvalidArgument(
            f"register_hooks needs a flatmachines HooksRegistry (flatmachines 4.x), got {type(registry).__name__}; "
            "flatmachines 1.x loads hooks from YAML instead: "
            "hooks: {module: workhive_flatmachines, class: WorkhiveWorkerHooks}"
        )

    def factory(**args: Any) -> WorkhiveWorkerHooks:
        return WorkhiveWorkerHooks(**{**defaults, **args})

    registry.register(name, factory)
    return registry
