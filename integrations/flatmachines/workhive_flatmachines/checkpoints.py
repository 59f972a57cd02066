"""Machine checkpoints and execution locks on a workhive hive.

``WorkhivePersistence`` is a flatmachines ``PersistenceBackend`` that keeps
checkpoint blobs in the hive's shared state (namespace
``flatmachines.checkpoints``), and ``WorkhiveExecutionLock`` an
``ExecutionLock`` on the hive's lock provider. Built from one handle
(``hive_checkpoints``), a machine interrupted on one host resumes on another
from its last checkpoint (``execute(resume_from=execution_id)``), and the two
are fenced: the lock hands out rising tokens, the highest is recorded beside
the execution, and a checkpoint write from a holder whose token is no longer
the highest raises ``ExecutionTakenOver`` instead of overwriting the new
holder's progress.

>>> machine = FlatMachine(config_file="m.yml", **hive_checkpoints("sqlite:///data/hive.db"))  # doctest: +SKIP
"""

from __future__ import annotations

import base64
import json
from datetime import datetime, timezone
from typing import Any

from flatmachines.locking import ExecutionLock
from flatmachines.persistence import PersistenceBackend

import workhive
from workhive.errors import InvalidArgument, LockTimeout
from workhive.locks import HeldLock
from workhive_flatmachines.connection import HiveHandle, open_handle
from workhive_flatmachines.errors import ExecutionTakenOver

__all__ = [
    "CHECKPOINT_NAMESPACE",
    "FENCE_NAMESPACE",
    "WorkhiveExecutionLock",
    "WorkhivePersistence",
    "hive_checkpoints",
]

#: shared-state namespace of checkpoint blobs (key: flatmachines' checkpoint key)
CHECKPOINT_NAMESPACE = "flatmachines.checkpoints"
#: shared-state namespace of the highest lock token handed out per execution
FENCE_NAMESPACE = "flatmachines.execution-fence"
_LOCK_PREFIX = "flatmachines.execution:"
_EARLIEST = datetime.min.replace(tzinfo=timezone.utc)


#: storages whose own URL names a lock provider shared by everyone who opens that storage
_SHARED_LOCK_SCHEMES = ("postgresql:", "postgres:", "redis:", "rediss:", "memory:")


def _handle(storage: str | workhive.Hive | HiveHandle | None, options: dict[str, Any]) -> HiveHandle:
    if isinstance(storage, str) and storage.startswith(_SHARED_LOCK_SCHEMES) and options.get("locks") is None:
        # Whoever opens this hive must meet the same execution locks: a server hive is shared
        # by hosts (workhive's default provider, fcntl, only excludes one machine's processes),
        # and memory://NAME by every handle of the process (plain memory:// locks are private).
        options = {**options, "locks": storage}
    return open_handle(storage, options)


def _execution_of(key: str) -> str:
    if not isinstance(key, str) or "/" not in key or key.startswith("/"):
        raise InvalidArgument(
            f"checkpoint key {key!r} is not '<execution id>/<name>' as flatmachines writes them", value=key
        )
    return key.split("/", 1)[0]


def _encode(value: bytes) -> dict[str, str]:
    if not isinstance(value, (bytes, bytearray)):
        raise InvalidArgument(f"a checkpoint is bytes, got {type(value).__name__}", value=type(value).__name__)
    try:
        return {"text": bytes(value).decode("utf-8")}  # readable in `workhive state` when it is text
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(value).decode("ascii")}


def _decode(stored: Any) -> bytes:
    if "text" in stored:
        return str(stored["text"]).encode("utf-8")
    return base64.b64decode(stored["base64"])


def _created_at(blob: bytes | None) -> datetime:
    """When a snapshot was taken (its ``created_at``); unreadable or missing counts as earliest."""
    try:
        stamp = json.loads(blob or b"").get("created_at")
        moment = datetime.fromisoformat(str(stamp).replace("Z", "+00:00"))
    except (ValueError, TypeError, AttributeError):
        return _EARLIEST
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=timezone.utc)


class WorkhivePersistence(PersistenceBackend):
    """flatmachines' ``PersistenceBackend`` on a workhive hive (any storage: memory, SQLite, PostgreSQL, Redis).

    ``storage``: a storage URL, a ``Hive``, a ``HiveHandle``, or None for
    workhive's own setting. Executions whose lock this process holds through
    a ``WorkhiveExecutionLock`` on the same handle are fenced (see the module).

    >>> persistence = WorkhivePersistence("sqlite:///data/hive.db")  # doctest: +SKIP
    >>> await persistence.save("exec-1/latest", b"exec-1/step_000001_execute.json")  # doctest: +SKIP
    """

    def __init__(self, storage: str | workhive.Hive | HiveHandle | None = None, **options: Any) -> None:
        self.handle = _handle(storage, options)

    def __repr__(self) -> str:
        return f"<WorkhivePersistence {self.handle!r}>"

    async def _state(self) -> workhive.SharedState:
        return (await self.handle.hive()).shared(CHECKPOINT_NAMESPACE)

    async def _check_fence(self, execution_id: str) -> None:
        held = self.handle.held_executions.get(execution_id)
        if held is None:
            return
        fence = await (await self.handle.hive()).shared(FENCE_NAMESPACE).get(execution_id)
        if fence is not None and fence > held.token:
            raise ExecutionTakenOver(
                f"execution {execution_id!r} was taken over by another process (lock token {fence}, this "
                f"process holds {held.token}): its checkpoints are that process's now; stop this run",
                execution_id=execution_id,
            )

    async def save(self, key: str, value: bytes) -> None:
        """Store one checkpoint blob; ``ExecutionTakenOver`` if another process now holds this execution."""
        execution_id = _execution_of(key)
        stored = _encode(value)
        await self._check_fence(execution_id)
        await (await self._state()).put(key, stored)

    async def load(self, key: str) -> bytes | None:
        """The blob saved under ``key``, or None."""
        _execution_of(key)
        stored = await (await self._state()).get(key)
        return None if stored is None else _decode(stored)

    async def delete(self, key: str) -> None:
        """Remove one blob (absent is fine)."""
        execution_id = _execution_of(key)
        await self._check_fence(execution_id)
        await (await self._state()).delete(key)

    async def _by_execution(self) -> dict[str, dict[str, bytes]]:
        grouped: dict[str, dict[str, bytes]] = {}
        for key, stored in (await (await self._state()).items()).items():
            if "/" in key:
                grouped.setdefault(key.split("/", 1)[0], {})[key] = _decode(stored)
        return grouped

    @staticmethod
    def _latest(blobs: dict[str, bytes], execution_id: str) -> bytes | None:
        pointer = blobs.get(f"{execution_id}/latest")
        return None if pointer is None else blobs.get(pointer.decode("utf-8", "replace"))

    async def list_execution_ids(self, *, event: str | None = None, waiting_channel: str | None = None) -> list[str]:
        """Executions with checkpoints; only those whose latest snapshot has ``event``/``waiting_channel`` if given."""
        found = []
        for execution_id, blobs in sorted((await self._by_execution()).items()):
            if event is not None or waiting_channel is not None:
                try:
                    snapshot = json.loads(self._latest(blobs, execution_id) or b"")
                except ValueError:
                    continue
                if not isinstance(snapshot, dict):
                    continue
                if event is not None and snapshot.get("event") != event:
                    continue
                if waiting_channel is not None and snapshot.get("waiting_channel") != waiting_channel:
                    continue
            found.append(execution_id)
        return found

    async def delete_execution(self, execution_id: str) -> None:
        """Remove every checkpoint of one execution."""
        state = await self._state()
        prefix = f"{execution_id}/"
        for key in [k for k in await state.items() if k.startswith(prefix)]:
            await state.delete(key)

    async def prune(self, *, max_age_seconds: float | None = None, max_count: int | None = None) -> int:
        """Remove whole executions: those whose latest snapshot is older than ``max_age_seconds``, then all but
        the ``max_count`` most recent. Returns how many executions were removed."""
        if max_age_seconds is not None and (
            isinstance(max_age_seconds, bool) or not isinstance(max_age_seconds, (int, float)) or max_age_seconds < 0
        ):
            raise InvalidArgument(f"max_age_seconds must be a number >= 0 or None, got {max_age_seconds!r}")
        if max_count is not None and (max_count.__class__ is not int or max_count < 0):
            raise InvalidArgument(f"max_count must be an int >= 0 or None, got {max_count!r}")
        when = {eid: _created_at(self._latest(blobs, eid)) for eid, blobs in (await self._by_execution()).items()}
        doomed: set[str] = set()
        if max_age_seconds is not None:
            now = datetime.now(timezone.utc)
            doomed |= {eid for eid, at in when.items() if (now - at).total_seconds() > max_age_seconds}
        if max_count is not None:
            kept = sorted((eid for eid in when if eid not in doomed), key=lambda e: (when[e], e), reverse=True)
            doomed |= set(kept[max_count:])
        for execution_id in sorted(doomed):
            await self.delete_execution(execution_id)
        return len(doomed)


class WorkhiveExecutionLock(ExecutionLock):
    """flatmachines' ``ExecutionLock`` on the hive's lock provider, fencing ``WorkhivePersistence`` on the same handle.

    ``acquire`` tries once (flatmachines raises if it gets False); a holder
    that dies (SIGKILL included) frees the lock through the provider (the
    kernel for fcntl, the session for PostgreSQL), so another process can
    resume the execution. Use a fleet-wide lock provider (``locks=
    "postgresql://…"`` or ``"redis://…"``) when machines resume on other hosts.

    >>> lock = WorkhiveExecutionLock("sqlite:///data/hive.db")  # doctest: +SKIP
    >>> await lock.acquire("exec-1")  # doctest: +SKIP
    True
    """

    def __init__(self, storage: str | workhive.Hive | HiveHandle | None = None, **options: Any) -> None:
        self.handle = _handle(storage, options)

    def __repr__(self) -> str:
        return f"<WorkhiveExecutionLock {self.handle!r}>"

    async def acquire(self, key: str) -> bool:
        """Take the execution's lock if free (True), else False; records the new fencing token."""
        hive = await self.handle.hive()
        if key in self.handle.held_executions:
            return False  # flatmachines' locks are not re-entrant: one run per execution at a time
        try:
            held = await hive.locks().acquire(_LOCK_PREFIX + key, ttl=None, timeout=0, worker_id=None)
        except LockTimeout:
            return False
        self.handle.held_executions[key] = held
        fences = hive.shared(FENCE_NAMESPACE)
        current = await fences.get(key)
        if current is None or held.token > current:
            await fences.put(key, held.token)
        return True

    async def release(self, key: str) -> None:
        """Free the execution's lock (a lock this process does not hold is left alone, as flatmachines does)."""
        held: HeldLock | None = self.handle.held_executions.pop(key, None)
        if held is not None:
            await (await self.handle.hive()).locks().release(held)


def hive_checkpoints(storage: str | workhive.Hive | HiveHandle | None = None, **options: Any) -> dict[str, Any]:
    """``persistence=`` and ``lock=`` for ``FlatMachine``, sharing one hive.

    >>> machine = FlatMachine(config_file="m.yml", **hive_checkpoints("sqlite:///data/hive.db"))  # doctest: +SKIP
    """
    handle = _handle(storage, options)
    return {"persistence": WorkhivePersistence(handle), "lock": WorkhiveExecutionLock(handle)}
