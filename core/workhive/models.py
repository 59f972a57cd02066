"""The data that crosses the storage contract: items, workers, statistics.

All models are frozen attrs classes: backends build them, callers read them.
Payloads travel as JSON text (validated once by the facade, stored as-is by
backends) and are decoded lazily on first access to ``.data``/``.result``.
"""

from __future__ import annotations

import enum
import json
import os
import socket
import uuid
from collections.abc import Callable
from typing import Any, Generic, TypeVar, overload

import attrs

from workhive.envelope import TIMEOUT_HEADER, headers, unseal

__all__ = [
    "Ack",
    "GroupReport",
    "GroupStats",
    "ItemState",
    "Job",
    "NewItem",
    "PoolStats",
    "ReapedWorker",
    "StepRecord",
    "WorkItem",
    "WorkerFilter",
    "WorkerRecord",
    "WorkerRegistration",
    "WorkerStatus",
]


class ItemState(str, enum.Enum):
    """Where an item is in its life. Delayed items are PENDING with a future ``available_at``."""

    PENDING = "pending"
    CLAIMED = "claimed"
    DONE = "done"
    POISONED = "poisoned"
    #: stopped by ``Pool.cancel``: terminal like DONE/POISONED (kept, listed, purged by age,
    #: requeueable by id); it frees its dedup key, and a holder's late settlement is refused
    CANCELLED = "cancelled"

    def __str__(self) -> str:
        return self.value


class WorkerStatus(str, enum.Enum):
    """A worker's self-reported status; LOST is set only by ``reap``."""

    STARTING = "starting"
    IDLE = "idle"
    BUSY = "busy"
    PAUSED = "paused"
    STOPPING = "stopping"
    STOPPED = "stopped"
    LOST = "lost"

    def __str__(self) -> str:
        return self.value


@attrs.frozen
class Job:
    """Data plus per-item options, for ``Pool.push_many``.

    >>> Job({"prompt": "hi"}, priority=5, dedup_key="doc-1", group="t-42")
    Job(data={'prompt': 'hi'}, priority=5, delay=0.0, max_attempts=None, dedup_key='doc-1', timeout=None, group='t-42')
    """

    data: Any
    priority: int = 0
    delay: float = 0.0
    max_attempts: int | None = None
    dedup_key: str | None = None
    #: seconds its handler may run (None: the fleet's ``--timeout``)
    timeout: float | None = None
    #: the group (tenant) it belongs to; None: the ``push_many(group=)`` default, else ungrouped
    group: str | None = None


# Not slotted, like WorkItem: one is built per pushed item (see WorkItem's note).
@attrs.frozen(slots=False)
class NewItem:
    """An item as handed to a backend's ``push``: already validated.

    ``payload`` is JSON text; ``delay`` is seconds from the backend's now;
    higher ``priority`` is claimed first.
    """

    payload: str
    priority: int = 0
    delay: float = 0.0
    max_attempts: int = 5
    dedup_key: str | None = None
    #: the group (tenant) whose turn serves it (docs/groups.md); None: the ungrouped items
    group: str | None = None


# Not slotted, like WorkItem: one is built per completed item (see WorkItem's note).
@attrs.frozen(slots=False)
class Ack:
    """One completion in a batch: the claim (id + fencing token) and the result JSON text."""

    item_id: str
    token: int
    result: str | None = None


_T = TypeVar("_T")


class _cached_property(Generic[_T]):
    """``functools.cached_property`` without its lock (Python before 3.12 takes one per first read).

    The values cached are pure functions of the item's fields, so two threads that
    compute one at once store the same value; a claim builds items by the thousand and
    the worker reads ``timeout`` of each, where that lock cost more than the read.
    """

    def __init__(self, func: Callable[[Any], _T]) -> None:
        self.func = func
        self.name = func.__name__
        self.__doc__ = func.__doc__

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> _cached_property[_T]: ...
    @overload
    def __get__(self, obj: object, owner: type | None = None) -> _T: ...
    def __get__(self, obj: object | None, owner: type | None = None) -> _T | _cached_property[_T]:
        if obj is None:
            return self
        value = obj.__dict__[self.name] = self.func(obj)  # read from the instance's dict from now on
        return value


# Not slotted: a frozen slotted class sets each field through object.__setattr__,
# a dict-backed one writes its __dict__ directly, which halves the cost of
# building the snapshot every claim returns. Still frozen for callers.
@attrs.frozen(slots=False)
class WorkItem:
    """A stored item as a backend reports it.

    ``id`` has the shape documented in ``workhive.ids`` on every backend.
    ``token`` is the fencing token: it rises with every claim of the item, and
    complete/fail/extend/release must present the one their claim returned
    (``receipt`` carries both in one string).
    Times are seconds since the epoch on the backend's clock.
    """

    id: str
    pool: str
    payload: str
    state: ItemState
    priority: int
    attempts: int
    max_attempts: int
    token: int
    created_at: float
    available_at: float
    claimed_by: str | None = None
    lease_expires_at: float | None = None
    lease_seconds: float | None = None
    dedup_key: str | None = None
    error: str | None = None
    result_payload: str | None = None
    finished_at: float | None = None
    releases: int = 0
    #: the group (tenant) it was pushed to, or None
    group: str | None = None

    @property
    def receipt(self) -> str:
        """This claim in one string (item id + fencing token), accepted wherever the claimed item is.

        >>> item.receipt  # doctest: +SKIP
        'i000000000000002a.3'
        """
        return f"{self.id}.{self.token}"

    @_cached_property
    def data(self) -> Any:
        """The pushed data, decoded from JSON."""
        return unseal(self.payload)  # without its envelope (workhive.envelope), if it has one

    @_cached_property
    def timeout(self) -> float | None:
        """Seconds its handler may run, as pushed (``push(..., timeout=)``); None: the fleet's ``--timeout``.

        Carried in the payload's envelope (``workhive.envelope``), so every engine keeps it.

        >>> item.timeout  # doctest: +SKIP
        300.0
        """
        found = headers(self.payload).get(TIMEOUT_HEADER)  # one startswith when there is no envelope
        return None if found is None else float(found)

    @_cached_property
    def result(self) -> Any:
        """The handler's result (None if not completed or no result)."""
        return None if self.result_payload is None else json.loads(self.result_payload)


def _default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


@attrs.frozen
class WorkerRegistration:
    """What a worker says about itself when it registers.

    >>> reg = WorkerRegistration(pools=("summaries",), capabilities=("llm",))
    >>> reg.pid == os.getpid()
    True
    """

    worker_id: str = attrs.field(factory=_default_worker_id)
    host: str = attrs.field(factory=socket.gethostname)
    pid: int = attrs.field(factory=os.getpid)
    pools: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    capabilities: tuple[str, ...] = attrs.field(default=(), converter=tuple)


@attrs.frozen
class WorkerRecord:
    """A registered worker as the registry knows it."""

    worker_id: str
    host: str
    pid: int
    pools: tuple[str, ...]
    capabilities: tuple[str, ...]
    status: WorkerStatus
    registered_at: float
    last_heartbeat: float
    detail: str | None = None


@attrs.frozen
class WorkerFilter:
    """Which workers ``list`` returns; every given field must match.

    ``stale_for``: only workers whose last heartbeat is at least that many
    seconds old (on the backend's clock).
    """

    statuses: frozenset[WorkerStatus] | None = attrs.field(default=None, converter=attrs.converters.optional(frozenset))
    host: str | None = None
    pool: str | None = None
    stale_for: float | None = None

    def matches(self, record: WorkerRecord, now: float) -> bool:
        """Reference semantics, usable by backends that filter in Python."""
        if self.statuses is not None and record.status not in self.statuses:
            return False
        if self.host is not None and record.host != self.host:
            return False
        if self.pool is not None and self.pool not in record.pools:
            return False
        return self.stale_for is None or now - record.last_heartbeat >= self.stale_for


@attrs.frozen
class ReapedWorker:
    """A worker that ``reap`` declared lost, and what happened to its items."""

    worker_id: str
    last_heartbeat: float
    released: int
    poisoned: int


@attrs.frozen
class PoolStats:
    """Counts for one pool. ``pending`` counts ready items; ``delayed`` those waiting for their time.

    ``cancelled`` comes last, with a default, so that a backend written before
    cancellation (which can hold no cancelled item) still builds it.
    """

    pool: str
    pending: int
    delayed: int
    claimed: int
    done: int
    poisoned: int
    oldest_pending_at: float | None = None
    cancelled: int = 0

    @property
    def total(self) -> int:
        return self.pending + self.delayed + self.claimed + self.done + self.poisoned + self.cancelled


@attrs.frozen
class StepRecord:
    """One durable step of an item as a backend reports it (``KeepsSteps.step_list``).

    ``payload`` is the step's result as JSON text (for a ``failed`` step: the
    error text, a JSON string), ``token`` the fencing token of the claim that
    stored it, ``stored_at`` the backend's time of the write.

    >>> StepRecord("search", '{"hits": 3}', False, 2, 1700000000.0).value
    {'hits': 3}
    """

    key: str
    payload: str
    failed: bool
    token: int
    stored_at: float

    @property
    def value(self) -> Any:
        """The step's result decoded from JSON (for a failed step, its error text)."""
        return json.loads(self.payload)


@attrs.frozen
class GroupStats:
    """One group of a pool as ``Pool.groups()`` reports it (``group`` None: the ungrouped items).

    ``limit`` is the group's own limit (None: none of its own, the pool's default
    then applies to a named group); ``in_flight`` counts unexpired claims;
    ``ready`` items claimable now (PENDING and due, or expired claims with
    attempts left); ``waiting`` PENDING items not yet due; ``paused_until`` the
    backend time its pause ends, only while that is in the future.

    >>> GroupStats("tenant-42", 2.0, 3, 1, 5, 0, None).ready
    5
    """

    group: str | None
    weight: float
    limit: int | None
    in_flight: int
    ready: int
    waiting: int
    paused_until: float | None = None


@attrs.frozen
class GroupReport:
    """The groups of a pool, their settings and counts (``Pool.groups()``; rule GR9).

    ``groups`` is sorted by name with the ungrouped items (None) first, and holds
    every group with a live item or a setting of its own.

    >>> report = GroupReport("jobs", None, 4, (GroupStats(None, 1.0, None, 0, 2, 0),))
    >>> [g.group for g in report.groups], report.default_limit
    ([None], 4)
    """

    pool: str
    pool_limit: int | None
    default_limit: int | None
    groups: tuple[GroupStats, ...] = ()

    def group(self, name: str | None) -> GroupStats | None:
        """The stats of group ``name`` (None: the ungrouped items), or None if the report has no such group."""
        return next((g for g in self.groups if g.group == name), None)
