"""The rate-budget contract suite: every backend implementing ``TakesBudget`` subclasses ``BudgetContract``.

A backend's tests override ``make_backend(clock, tmp_path)`` (an unopened
backend over a fresh store; embedded backends take ``clock=clock``, server
backends ``clock_offset=clock.offset``) and, when the backend declares
``"multiprocess"``, ``multiprocess_store(tmp_path)``::

    from workhive.testing.budgets import BudgetContract

    class TestMyBudgets(BudgetContract):
        def make_backend(self, clock, tmp_path):
            return MyBackend(f"mystore:///{tmp_path}/db", clock=clock)

        def multiprocess_store(self, tmp_path):
            return f"mystore:///{tmp_path}/db", {}

The rules (``workhive.budgets.gcra_choose`` is the reference): per key, a
take of ``cost`` at ``interval`` moves the theoretical arrival time (TAT) to
``max(TAT, now) + cost * interval`` and may go ``max(0, TAT - tolerance - now)``
seconds from now; the soonest of several choices is reserved (ties: the
first) when it can go within ``max_wait``, else nothing changes; negative
costs give budget back, never below ``now``. Every take is atomic across
tasks and processes. Intervals here are long (hundreds of seconds) so that
a server clock moving on its own during a test changes no answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import itertools
import math
import multiprocessing
import pathlib
import time
from collections.abc import AsyncIterator
from typing import Any, ClassVar

import pytest
import pytest_asyncio

from workhive.budgets import BudgetTake, TakesBudget
from workhive.testing.clock import ManualClock

__all__ = ["BudgetContract"]

#: seconds per unit in these tests: long, so a real clock's drift during a test is noise
INTERVAL = 600.0
#: answers may differ from the exact figure by this much (a server clock runs on during a test)
SLACK = 5.0


def _take(key: str = "k:rpm", cost: float = 1.0, interval: float = INTERVAL, tolerance: float = INTERVAL) -> BudgetTake:
    return BudgetTake(key, interval, tolerance, cost)


class BudgetContract:
    """Subclass in your backend's tests and override ``make_backend``."""

    multiprocess_processes: ClassVar[int] = 3
    multiprocess_takes: ClassVar[int] = 20

    def make_backend(self, clock: ManualClock, tmp_path: pathlib.Path) -> Any:
        """Return an unopened backend over a fresh store under ``tmp_path``, on ``clock``."""
        raise NotImplementedError("override make_backend() in your BudgetContract subclass")

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        """``(url, options)`` by which another process opens the store (backends declaring "multiprocess")."""
        raise NotImplementedError("override multiprocess_store() to test budgets shared by several processes")

    @pytest.fixture
    def clock(self) -> ManualClock:
        return ManualClock()

    @pytest_asyncio.fixture
    async def backend(self, clock: ManualClock, tmp_path: pathlib.Path) -> AsyncIterator[Any]:
        backend = self.make_backend(clock, tmp_path)
        await backend.open()
        try:
            yield backend
        finally:
            await backend.close()

    # -- the capability --------------------------------------------------------
    def test_backend_declares_the_capability(self, clock: ManualClock, tmp_path: pathlib.Path) -> None:
        assert isinstance(self.make_backend(clock, tmp_path), TakesBudget)

    @pytest.mark.asyncio
    async def test_first_take_goes_at_once_and_the_next_waits_one_interval(self, backend: Any) -> None:
        assert await backend.take_budget([[_take()]], 0.0) == (0, 0.0)
        index, wait = await backend.take_budget([[_take()]], math.inf)
        assert index == 0 and wait == pytest.approx(INTERVAL, abs=SLACK)
        index, wait = await backend.take_budget([[_take()]], math.inf)
        assert wait == pytest.approx(2 * INTERVAL, abs=SLACK), "a reservation that must wait is still reserved"

    @pytest.mark.asyncio
    async def test_a_take_beyond_max_wait_changes_nothing(self, backend: Any) -> None:
        await backend.take_budget([[_take()]], 0.0)
        for _ in range(3):
            index, wait = await backend.take_budget([[_take()]], INTERVAL / 2)
            assert index == 0 and wait == pytest.approx(INTERVAL, abs=SLACK), "refused takes must not move the schedule"
        assert (await backend.take_budget([[_take()]], math.inf))[1] == pytest.approx(INTERVAL, abs=SLACK)

    @pytest.mark.asyncio
    async def test_time_passing_frees_budget(self, backend: Any, clock: ManualClock) -> None:
        await backend.take_budget([[_take()]], 0.0)
        clock.advance(INTERVAL)
        assert await backend.take_budget([[_take()]], 0.0) == (0, 0.0)

    @pytest.mark.asyncio
    async def test_idle_time_does_not_bank_more_than_the_tolerance(self, backend: Any, clock: ManualClock) -> None:
        burst = _take(tolerance=3 * INTERVAL)
        await backend.take_budget([[burst]], 0.0)
        clock.advance(100 * INTERVAL)
        waits = [(await backend.take_budget([[burst]], math.inf))[1] for _ in range(5)]
        assert waits[:3] == [0.0, 0.0, 0.0], f"a tolerance of 3 intervals allows a burst of 3: {waits}"
        assert waits[3] == pytest.approx(INTERVAL, abs=SLACK), waits
        assert waits[4] == pytest.approx(2 * INTERVAL, abs=SLACK), waits

    @pytest.mark.asyncio
    async def test_the_soonest_choice_is_reserved_ties_go_to_the_first(self, backend: Any) -> None:
        a, b = _take("a:rpm"), _take("b:rpm")
        assert (await backend.take_budget([[a], [b]], math.inf))[0] == 0  # tie: the first (least recently used)
        assert (await backend.take_budget([[a], [b]], math.inf)) == (1, 0.0)  # b is free, a is not
        c, d = _take("c:rpm"), _take("d:rpm")
        assert (await backend.take_budget([[d], [c]], math.inf)) == (0, 0.0)  # never used: a tie on any clock

    @pytest.mark.asyncio
    async def test_every_dimension_of_a_choice_is_taken_and_the_longest_wait_counts(self, backend: Any) -> None:
        tokens = _take("k:tpm", cost=3.0, interval=INTERVAL, tolerance=INTERVAL)
        index, wait = await backend.take_budget([[_take(), tokens]], math.inf)
        assert index == 0 and wait == pytest.approx(2 * INTERVAL, abs=SLACK)  # 3 tokens, one interval of tolerance
        index, wait = await backend.take_budget([[_take()]], math.inf)
        assert wait == pytest.approx(INTERVAL, abs=SLACK), "the request dimension was taken once"
        index, wait = await backend.take_budget([[_take("k:tpm", cost=1.0)]], math.inf)
        assert wait == pytest.approx(3 * INTERVAL, abs=SLACK), "the token dimension was taken 3"

    @pytest.mark.asyncio
    async def test_a_refused_choice_takes_no_dimension(self, backend: Any) -> None:
        await backend.take_budget([[_take("k:tpm", cost=2.0)]], math.inf)
        _index, wait = await backend.take_budget([[_take(), _take("k:tpm")]], 0.0)
        assert wait > 0
        assert await backend.take_budget([[_take()]], 0.0) == (0, 0.0), "the request dimension was left alone"

    @pytest.mark.asyncio
    async def test_a_negative_cost_gives_budget_back_but_never_below_now(self, backend: Any) -> None:
        await backend.take_budget([[_take(cost=4.0)]], math.inf)
        assert (await backend.take_budget([[_take(cost=-2.0)]], math.inf))[1] == 0.0
        _, wait = await backend.take_budget([[_take()]], math.inf)
        assert wait == pytest.approx(2 * INTERVAL, abs=SLACK)  # 4 taken, 2 given back, 1 more: 3 ahead, 1 tolerated
        await backend.take_budget([[_take(cost=-50.0)]], math.inf)
        assert await backend.take_budget([[_take()]], 0.0) == (0, 0.0)
        _index, wait = await backend.take_budget([[_take()]], math.inf)
        assert wait == pytest.approx(INTERVAL, abs=SLACK), "giving back more than was taken banks nothing"

    @pytest.mark.asyncio
    async def test_a_positive_correction_is_taken_whatever_the_wait(self, backend: Any) -> None:
        await backend.take_budget([[_take()]], 0.0)
        _index, wait = await backend.take_budget([[_take(cost=5.0)]], math.inf)
        assert wait == pytest.approx(5 * INTERVAL, abs=SLACK)
        assert (await backend.take_budget([[_take()]], math.inf))[1] == pytest.approx(6 * INTERVAL, abs=SLACK)

    @pytest.mark.asyncio
    async def test_keys_are_independent(self, backend: Any) -> None:
        await backend.take_budget([[_take("a:rpm")]], 0.0)
        assert await backend.take_budget([[_take("b:rpm")]], 0.0) == (0, 0.0)
        assert await backend.take_budget([[_take("a:tpm")]], 0.0) == (0, 0.0)

    @pytest.mark.asyncio
    async def test_concurrent_takes_are_atomic(self, backend: Any) -> None:
        """Fifty tasks at once: each reservation lands one interval after another, none is lost."""
        results = await asyncio.gather(*(backend.take_budget([[_take()]], math.inf) for _ in range(50)))
        waits = sorted(wait for _, wait in results)
        assert waits[0] == 0.0
        for before, after in itertools.pairwise(waits):
            assert after - before == pytest.approx(INTERVAL, abs=SLACK), f"two takes overlapped: {waits[:10]}"

    @pytest.mark.asyncio
    async def test_two_backends_over_one_store_share_the_budget(
        self, backend: Any, clock: ManualClock, tmp_path: pathlib.Path
    ) -> None:
        other = self.make_backend(clock, tmp_path)
        await other.open()
        try:
            await backend.take_budget([[_take()]], 0.0)
            _index, wait = await other.take_budget([[_take()]], math.inf)
            assert wait == pytest.approx(INTERVAL, abs=SLACK), "a second handle on the store sees the first's take"
        finally:
            await other.close()

    @pytest.mark.asyncio
    async def test_the_schedule_survives_reopening(
        self, backend: Any, clock: ManualClock, tmp_path: pathlib.Path
    ) -> None:
        await backend.take_budget([[_take(cost=3.0)]], math.inf)
        await backend.close()
        await backend.open()
        assert (await backend.take_budget([[_take()]], math.inf))[1] == pytest.approx(3 * INTERVAL, abs=SLACK)

    def test_several_processes_share_one_budget_and_never_exceed_it(
        self, clock: ManualClock, tmp_path: pathlib.Path
    ) -> None:
        """Processes reserving on one key get one schedule: every reservation one interval from the next."""
        probe = self.make_backend(clock, tmp_path / "probe")
        if "multiprocess" not in getattr(probe, "capabilities", frozenset()):
            pytest.skip("the backend does not declare the 'multiprocess' capability")
        url, options = self.multiprocess_store(tmp_path)
        signals = tmp_path / "budget-signals"
        signals.mkdir()
        context = multiprocessing.get_context("spawn")
        n = self.multiprocess_processes
        with concurrent.futures.ProcessPoolExecutor(n, mp_context=context) as executor:
            futures = [
                executor.submit(_reserve_in_process, url, options, str(signals), f"p{i}", self.multiprocess_takes)
                for i in range(n)
            ]
            deadline = time.monotonic() + 120.0  # generous: spawning on a loaded machine is slow
            while not all((signals / f"ready-p{i}").exists() for i in range(n)):
                for future in futures:
                    if future.done():
                        future.result()  # a process that failed to open the store: its error, at once
                assert time.monotonic() < deadline, "worker processes did not open the store in 120 s"
                time.sleep(0.01)
            (signals / "go").touch()
            results = [f.result(timeout=300) for f in futures]
        starts = sorted(t for result in results for t in result)
        assert len(starts) == n * self.multiprocess_takes
        gaps = [after - before for before, after in itertools.pairwise(starts)]
        assert min(gaps) >= INTERVAL - SLACK, f"two processes were granted the same slot: smallest gap {min(gaps):.3f}s"
        assert max(gaps) <= INTERVAL + SLACK, f"the schedule has a hole: largest gap {max(gaps):.3f}s"


def _reserve_in_process(url: str, options: dict[str, Any], signals: str, name: str, takes: int) -> list[float]:
    """In a worker process: reserve ``takes`` calls on one key; return when each may start (backend time)."""
    import workhive

    async def run() -> list[float]:
        starts = []
        async with workhive.open(url, **options) as hive:
            (pathlib.Path(signals) / f"ready-{name}").touch()
            deadline = time.monotonic() + 120.0
            while not (pathlib.Path(signals) / "go").exists():
                if time.monotonic() > deadline:
                    raise TimeoutError("no signal to start within 120 s")
                await asyncio.sleep(0.01)
            for _ in range(takes):
                storage: Any = hive.storage
                _, wait = await storage.take_budget([[_take("shared:rpm")]], math.inf)
                starts.append(await hive.now() + wait)
        return starts

    return asyncio.run(run())
