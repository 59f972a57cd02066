"""Schedules: recurring items, stored in the hive and fired by every running supervisor.

A schedule pushes its data to its pool on every tick of a cron expression
(``cronsim``, in a time zone from ``zoneinfo``, DST-correct) or every so many
seconds. Any number of supervisors may fire the same schedules: each tick is
pushed exactly once, because the backend records "schedule S fired through
tick T" and pushes the item in one atomic step (``StoresSchedules.schedule_fire``);
a supervisor that comes second finds the tick recorded and pushes nothing.
That record lives in the schedule itself, so it outlives the item (a
``dedup_key`` is freed once its item is done, and would let a late firer push
the tick again).

After downtime the misfire policy decides: ``catch_up=0`` (the default, "skip
to now") fires only the latest missed tick; ``catch_up=N`` fires at most the N
latest missed ticks, oldest first.

>>> async def main():  # doctest: +SKIP
...     async with workhive.open("sqlite:///.workhive/hive.db") as hive:
...         schedules = hive.schedules()
...         await schedules.add("nightly", "reports", cron="0 3 * * *", tz="Europe/Berlin", data={"kind": "daily"})
...         await hive.schedules().fire_due()   # what `workhive work` does every second
"""

from __future__ import annotations

import builtins
import datetime as dt
import json
import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import attrs

from workhive.errors import ConfigError, InvalidArgument, ScheduleExists, ScheduleNotFound
from workhive.models import NewItem
from workhive.validation import check_count, check_name, to_json

if TYPE_CHECKING:
    import zoneinfo

    from workhive.hive import Hive

__all__ = [
    "Fired",
    "MAX_CATCH_UP",
    "Schedule",
    "Schedules",
    "StoresSchedules",
    "due_ticks",
    "parse_every",
]

#: the most missed ticks one schedule may catch up after downtime
MAX_CATCH_UP = 1000
#: the shortest interval ``every`` accepts (seconds): a supervisor fires about once a second
MIN_EVERY = 1.0

_EVERY = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, None: 1.0}


def parse_every(value: str | float) -> float:
    """Seconds from ``30s``, ``5m``, ``2h``, ``1d`` or a number of seconds; ``InvalidArgument`` otherwise.

    >>> parse_every("90s"), parse_every("5m"), parse_every(2.5)
    (90.0, 300.0, 2.5)
    >>> parse_every("0")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    workhive.errors.InvalidArgument: every '0' is too short: a schedule fires at most once a second ...
    """
    if isinstance(value, bool):
        raise InvalidArgument(f"every must be a duration such as 30s, 5m or 1h, not {value!r}", every=value)
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _EVERY.fullmatch(str(value))
        if match is None:
            raise InvalidArgument(
                f"every {value!r} is not a duration: use a number with s, m, h or d (e.g. 30s, 5m, 1h)", every=value
            )
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds) or seconds < MIN_EVERY:
        raise InvalidArgument(
            f"every {value!r} is too short: a schedule fires at most once a second (use e.g. 30s, 5m, 1h)",
            every=value,
        )
    return seconds


def _zone(tz: str) -> zoneinfo.ZoneInfo:
    # Imported here: every process imports this module (through the hive), few use a time zone;
    # zoneinfo's import reads sysconfig for the tz search path.
    import zoneinfo

    if not isinstance(tz, str) or not tz:
        raise InvalidArgument(f"time zone {tz!r} is not a name such as UTC or Europe/Berlin", tz=tz)
    try:
        return zoneinfo.ZoneInfo(tz)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
        raise InvalidArgument(
            f"unknown time zone {tz!r}: use an IANA name such as UTC, Europe/Berlin or America/New_York",
            tz=tz,
        ) from None


def _cron(expression: str, tz: str) -> Any:
    """A ``cronsim.CronSim`` check of ``expression``; ``InvalidArgument`` saying what is wrong."""
    from cronsim import CronSim, CronSimError  # imported here: only schedules need it

    if not isinstance(expression, str) or not expression.strip():
        raise InvalidArgument(f"cron expression {expression!r} is empty: five fields, e.g. '*/5 * * * *'")
    try:
        return CronSim(expression, dt.datetime(2000, 1, 1, tzinfo=_zone(tz)))
    except CronSimError as exc:
        raise InvalidArgument(
            f"cron expression {expression!r} does not parse ({exc}): five fields, minute hour day-of-month "
            "month day-of-week, e.g. '*/5 * * * *' or '0 3 * * MON-FRI'",
            cron=expression,
        ) from None


@attrs.frozen
class Schedule:
    """A stored schedule. Exactly one of ``cron`` and ``every`` is set.

    ``payload`` is the item's data as JSON text; ``last_tick`` the latest tick
    fired (None: none yet); ticks count from ``created_at``. Times are seconds
    since the epoch on the hive's clock.

    >>> s = Schedule("tick", "jobs", None, 60.0, "UTC", '{"a": 1}', 0, 1000.0, None)
    >>> s.next_tick(), s.data
    (1060.0, {'a': 1})
    """

    name: str
    pool: str
    cron: str | None
    every: float | None
    tz: str
    payload: str
    catch_up: int
    created_at: float
    last_tick: float | None = None

    def fired(self, tick: float) -> Schedule:
        """This schedule with ``tick`` recorded as the latest fired (for backends that keep records).

        >>> Schedule("t", "p", None, 60.0, "UTC", "1", 0, 0.0).fired(60.0).last_tick
        60.0
        """
        return attrs.evolve(self, last_tick=tick)

    @property
    def data(self) -> Any:
        """The data each tick's item carries."""
        return json.loads(self.payload)

    @property
    def misfire(self) -> str:
        """The misfire policy in words: ``skip`` or ``catch-up N``."""
        return "skip" if self.catch_up == 0 else f"catch-up {self.catch_up}"

    @property
    def anchor(self) -> float:
        """Ticks after this time are still to fire."""
        return self.created_at if self.last_tick is None else self.last_tick

    def next_tick(self, after: float | None = None) -> float:
        """The first tick strictly after ``after`` (default: the last one fired, else the creation time)."""
        start = self.anchor if after is None else after
        if self.every is not None:
            steps = math.floor((start - self.created_at) / self.every) + 1
            return self.created_at + max(1, steps) * self.every
        assert self.cron is not None
        from cronsim import CronSim

        zone = _zone(self.tz)
        it = CronSim(self.cron, dt.datetime.fromtimestamp(start, zone))
        return next(it).timestamp()

    def to_json(self) -> dict[str, Any]:
        """A plain dict (CLI ``--json``, the dashboard)."""
        return {
            "name": self.name,
            "pool": self.pool,
            "cron": self.cron,
            "every": self.every,
            "tz": self.tz,
            "data": self.data,
            "misfire": self.misfire,
            "catch_up": self.catch_up,
            "created_at": self.created_at,
            "last_tick": self.last_tick,
            "next_tick": self.next_tick(),
        }


def due_ticks(schedule: Schedule, now: float) -> list[float]:
    """The ticks to fire at ``now``, oldest first: those in ``(anchor, now]``, the misfire policy applied.

    Skip (``catch_up=0``) keeps the latest one; ``catch_up=N`` the latest N.
    Computed without walking every missed tick, so a long downtime costs the
    same as a short one.

    >>> s = Schedule("t", "p", None, 10.0, "UTC", "null", 2, 0.0, None)
    >>> due_ticks(s, 5.0), due_ticks(s, 10.0), due_ticks(s, 1000.0)
    ([], [10.0], [990.0, 1000.0])
    """
    keep = max(1, schedule.catch_up)
    anchor = schedule.anchor
    if now <= anchor:
        return []
    if schedule.every is not None:
        every, base = schedule.every, schedule.created_at
        first = math.floor((anchor - base) / every) + 1
        last = math.floor((now - base) / every)
        return [base + k * every for k in range(max(first, last - keep + 1), last + 1)]
    assert schedule.cron is not None
    from cronsim import CronSim

    zone = _zone(schedule.tz)
    # Backwards from now (cronsim's reverse): the latest ticks first, stopping at the anchor.
    # The start is a second past now, so a tick exactly at now is included.
    ticks: list[float] = []
    for when in CronSim(schedule.cron, dt.datetime.fromtimestamp(now + 1.0, zone), reverse=True):
        tick = when.timestamp()
        if tick > now:
            continue
        if tick <= anchor or len(ticks) == keep:
            break
        ticks.append(tick)
    return ticks[::-1]


@runtime_checkable
class StoresSchedules(Protocol):
    """The optional backend methods that keep schedules (rules SC1-SC5 in ``workhive.storage``).

    >>> class MyBackend:  # doctest: +SKIP
    ...     async def schedule_fire(self, name, tick, item):
    ...         async with self.transaction():
    ...             if not await self._advance_tick(name, tick):   # last_tick < tick, then last_tick = tick
    ...                 return None
    ...             return (await self._push(schedule.pool, [item]))[0]
    """

    async def schedule_add(self, schedule: Schedule) -> bool:
        """Store ``schedule``; False (and nothing changed) when its name is taken."""
        ...

    async def schedule_get(self, name: str) -> Schedule | None:
        """The schedule called ``name``, or None."""
        ...

    async def schedule_list(self) -> list[Schedule]:
        """Every schedule, sorted by name."""
        ...

    async def schedule_remove(self, name: str) -> bool:
        """Delete the schedule; False when there was none."""
        ...

    async def schedule_fire(self, name: str, tick: float, item: NewItem) -> str | None:
        """Atomically: if schedule ``name`` exists and its ``last_tick`` is None or below ``tick``,
        set ``last_tick = tick`` and push ``item`` to its pool, returning the item's id; else None.
        """
        ...


@attrs.frozen
class Fired:
    """One tick pushed by ``Schedules.fire_due``."""

    schedule: str
    pool: str
    tick: float
    item_id: str


class Schedules:
    """A hive's schedules: ``hive.schedules()``.

    >>> async def main(hive):  # doctest: +SKIP
    ...     await hive.schedules().add("poll", "feeds", every="30s", data={"feed": "news"})
    ...     [s.name for s in await hive.schedules().list()]
    ['poll']
    """

    def __init__(self, hive: Hive) -> None:
        self.hive = hive

    @property
    def storage(self) -> StoresSchedules:
        storage = self.hive.storage
        if not isinstance(storage, StoresSchedules):
            raise ConfigError(
                f"the storage backend {type(storage).__name__} does not keep schedules; use a storage that does "
                "(sqlite, postgresql, redis, memory)",
                backend=storage,
            )
        return storage

    async def add(
        self,
        name: str,
        pool: str,
        *,
        cron: str | None = None,
        every: str | float | None = None,
        tz: str = "UTC",
        data: Any = None,
        catch_up: int = 0,
    ) -> Schedule:
        """Store a new schedule and return it; everything is checked before anything is stored.

        ``InvalidName`` (name, pool), ``InvalidArgument`` (cron that does not parse, unknown
        time zone, ``every`` under a second, neither or both of cron and every, catch_up out of
        range), ``InvalidItem`` (data not JSON), ``ScheduleExists`` (name taken).
        """
        check_name("pool", pool)
        check_name("schedule", name)
        if (cron is None) == (every is None):
            raise InvalidArgument("a schedule needs exactly one of cron (e.g. '*/5 * * * *') and every (e.g. 30s)")
        seconds: float | None = None
        if cron is not None:
            _cron(cron, tz)
            cron = " ".join(cron.split())
        else:
            assert every is not None
            seconds = parse_every(every)
        _zone(tz)
        if isinstance(catch_up, bool) or not isinstance(catch_up, int) or not 0 <= catch_up <= MAX_CATCH_UP:
            raise InvalidArgument(
                f"catch_up {catch_up!r} must be a whole number from 0 (skip missed ticks) to {MAX_CATCH_UP}",
                catch_up=catch_up,
            )
        payload = to_json(data)
        storage = self.storage
        schedule = Schedule(name, pool, cron, seconds, tz, payload, catch_up, await self.hive.now())
        if not await storage.schedule_add(schedule):
            raise ScheduleExists(
                f"a schedule named {name!r} exists already; remove it first (workhive schedule rm {name}) "
                "or pick another name",
                name=name,
            )
        return schedule

    async def get(self, name: str) -> Schedule:
        """The schedule called ``name``; ``ScheduleNotFound`` if there is none."""
        check_name("schedule", name)
        found = await self.storage.schedule_get(name)
        if found is None:
            raise ScheduleNotFound(f"no schedule named {name!r}; `workhive schedule list` shows them", name=name)
        return found

    async def list(self) -> list[Schedule]:
        """Every schedule, by name."""
        return await self.storage.schedule_list()

    async def remove(self, name: str) -> None:
        """Delete the schedule; ``ScheduleNotFound`` if there is none."""
        check_name("schedule", name)
        if not await self.storage.schedule_remove(name):
            raise ScheduleNotFound(f"no schedule named {name!r}; `workhive schedule list` shows them", name=name)

    async def fire_due(self, names: Sequence[str] | None = None) -> builtins.list[Fired]:
        """Push every due tick of every schedule (or of ``names``) at the hive's now; returns what this call pushed.

        Safe to call from any number of processes at once: a tick another caller
        pushed already is not pushed again (the backend's ``schedule_fire``).
        """
        storage = self.storage
        now = await self.hive.now()
        fired: builtins.list[Fired] = []
        for schedule in await storage.schedule_list():
            if names is not None and schedule.name not in names:
                continue
            for tick in due_ticks(schedule, now):
                item = NewItem(schedule.payload, max_attempts=check_count("max_attempts", self.hive.max_attempts))
                item_id = await storage.schedule_fire(schedule.name, tick, item)
                if item_id is not None:
                    fired.append(Fired(schedule.name, schedule.pool, tick, item_id))
        return fired
