"""Schedules fired from several hive handles at once: each tick must be pushed exactly once.

``three_firers`` is what each engine's ``test_<engine>_schedules.py`` runs:
three threads, each with its own event loop and its own ``Hive`` on the same
store (own connections), fire the hive's due schedules in the same moments
while the test moves a ``ManualClock`` (``clock=`` or ``clock_offset=``) a
tick at a time. Barriers order the rounds, never sleeps: every round, all
three fire at once, and the store alone decides who pushes.

>>> fired = three_firers(lambda: workhive.open(url, clock=clock), clock, rounds=5)  # doctest: +SKIP
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable

import attrs

from workhive.hive import Hive
from workhive.models import ItemState
from workhive.schedules import Fired
from workhive.testing.clock import ManualClock

__all__ = ["FiringRun", "check_each_tick_pushed_once", "three_firers"]

#: how long a barrier waits for the others before the test fails (a hung firer, not a slow one)
BARRIER_TIMEOUT = 300.0


@attrs.frozen
class FiringRun:
    """What ``three_firers`` saw: per round, what each firer pushed; and the pools' items at the end."""

    rounds: list[list[list[Fired]]]
    items: dict[str, list[str]]  # pool -> the data of its pending items, in push order


def three_firers(
    open_hive: Callable[[], Hive], clock: ManualClock, *, rounds: int = 6, step: float = 60.0, firers: int = 3
) -> FiringRun:
    """Add two schedules (every 60 s, and cron every minute in Europe/Berlin), then ``rounds`` times:
    move ``clock`` by ``step`` and let ``firers`` handles fire at once. Returns what each pushed.
    """
    start = threading.Barrier(firers + 1, timeout=BARRIER_TIMEOUT)
    done = threading.Barrier(firers + 1, timeout=BARRIER_TIMEOUT)
    seen: list[list[list[Fired]]] = [[[] for _ in range(firers)] for _ in range(rounds)]
    errors: list[BaseException] = []

    async def setup() -> None:
        async with open_hive() as hive:
            await hive.schedules().add("every-minute", "sched-every", every="60s", data={"kind": "every"})
            await hive.schedules().add(
                "cron-minute", "sched-cron", cron="* * * * *", tz="Europe/Berlin", data={"kind": "cron"}
            )

    async def fire_loop(index: int) -> None:
        async with open_hive() as hive:
            for r in range(rounds):
                await asyncio.to_thread(start.wait)
                try:
                    seen[r][index] = await hive.schedules().fire_due()
                finally:
                    await asyncio.to_thread(done.wait)

    def run(index: int) -> None:
        try:
            asyncio.run(fire_loop(index))
        except BaseException as exc:  # reported to the test below
            errors.append(exc)
            start.abort()
            done.abort()

    asyncio.run(setup())
    threads = [threading.Thread(target=run, args=(i,), name=f"firer-{i}") for i in range(firers)]
    for thread in threads:
        thread.start()
    try:
        for _ in range(rounds):
            clock.advance(step)
            start.wait()
            done.wait()
    except threading.BrokenBarrierError:
        pass
    for thread in threads:
        thread.join(BARRIER_TIMEOUT)
    if errors:
        raise errors[0]

    async def read() -> dict[str, list[str]]:
        async with open_hive() as hive:
            return {
                pool: [item.data["kind"] for item in await hive.pool(pool).items(ItemState.PENDING, limit=1000)]
                for pool in ("sched-every", "sched-cron")
            }

    return FiringRun(seen, asyncio.run(read()))


def check_each_tick_pushed_once(run: FiringRun, rounds: int) -> None:
    """[SC3][SC4] what every engine's test asserts of ``three_firers(..., rounds=rounds)`` with ``step=60``."""
    for r, per_firer in enumerate(run.rounds):
        ticks = [(f.schedule, f.tick) for fired in per_firer for f in fired]
        # Every round moved the clock a minute: each schedule has one tick due, pushed by one firer.
        assert sorted(s for s, _ in ticks) == ["cron-minute", "every-minute"], f"round {r}: {per_firer}"
    every = [f.tick for round_ in run.rounds for fired in round_ for f in fired if f.schedule == "every-minute"]
    assert len(set(every)) == rounds
    assert run.items == {"sched-every": ["every"] * rounds, "sched-cron": ["cron"] * rounds}
