"""The fleet runtime's pure parts: handler loading, option checks, health, progress, event tally."""

from __future__ import annotations

import asyncio
import io
import textwrap

import pytest

from workhive.errors import ConfigError
from workhive.runtime import FleetOptions, FleetProgress, check_options, format_line, load_handler, renderer_for
from workhive.runtime.events import ListSink, Tally
from workhive.runtime.health import HealthPolicy, WorkerHealth
from workhive.runtime.progress import LineRenderer, LogRenderer


@pytest.fixture
def handler_module(tmp_path, monkeypatch):
    (tmp_path / "rt_handlers.py").write_text(
        textwrap.dedent(
            """
            VALUE = 3

            def sync_handler(ctx):
                return {"got": ctx}

            async def async_handler(ctx):
                return {"got": ctx}

            class Box:
                @staticmethod
                def run(ctx):
                    return ctx

            class AsyncCallable:
                async def __call__(self, ctx):
                    return ctx

            instance = AsyncCallable()
            """
        )
    )
    (tmp_path / "rt_broken.py").write_text("import not_a_real_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "rt_handlers"


class TestLoadHandler:
    def test_sync_function_runs_in_a_thread_and_returns_its_result(self, handler_module):
        handler = load_handler(f"{handler_module}:sync_handler")
        assert not handler.is_async
        assert asyncio.run(handler("ctx")) == {"got": "ctx"}

    def test_async_function_is_awaited(self, handler_module):
        handler = load_handler(f"{handler_module}:async_handler")
        assert handler.is_async
        assert asyncio.run(handler("ctx")) == {"got": "ctx"}

    def test_dotted_attribute_and_async_callable_instance(self, handler_module):
        assert asyncio.run(load_handler(f"{handler_module}:Box.run")("x")) == "x"
        assert load_handler(f"{handler_module}:instance").is_async

    @pytest.mark.parametrize("spec", ["no_colon_here", "a:b:c", ":func", "module:", ""])
    def test_malformed_spec_is_a_config_error(self, spec):
        with pytest.raises(ConfigError, match=r"module:function|module and a function"):
            load_handler(spec)

    def test_unknown_module_names_the_module(self):
        with pytest.raises(ConfigError, match=r"no module named 'surely_missing_mod'"):
            load_handler("surely_missing_mod:run")

    def test_module_whose_own_import_fails_reports_that_error(self, handler_module):
        with pytest.raises(ConfigError, match=r"importing module 'rt_broken' failed.*not_a_real_dependency_xyz"):
            load_handler("rt_broken:run")

    def test_unknown_function_lists_what_the_module_has(self, handler_module):
        with pytest.raises(ConfigError, match=r"has no attribute 'nope'.*sync_handler"):
            load_handler(f"{handler_module}:nope")

    def test_not_callable_says_what_it_is(self, handler_module):
        with pytest.raises(ConfigError, match=r"'VALUE' is a int, not a function"):
            load_handler(f"{handler_module}:VALUE")


class TestCheckOptions:
    def test_defaults_are_valid(self):
        check_options(FleetOptions(pool="jobs", handler="m:f"))

    @pytest.mark.parametrize(
        ("changes", "message"),
        [
            ({"processes": 0}, "processes must be an integer >= 1"),
            ({"concurrency": -1}, "concurrency"),
            ({"batch": 0}, "batch"),
            ({"lease": 0}, "lease must be a number of seconds > 0"),
            ({"heartbeat": 60.0, "lease": 30.0}, "heartbeat .* must be shorter than lease"),
            ({"heartbeat": 5.0, "lease": 30.0, "reap_after": 5.0}, "shorter than reap_after"),
            ({"grace": -1}, "grace must be a number of seconds >= 0"),
            ({"min_processes": 4, "max_processes": 2}, "must not exceed max_processes"),
            ({"pool": "bad name!"}, "pool name"),
        ],
    )
    def test_bad_option_is_named(self, changes, message):
        with pytest.raises(ConfigError, match=message):
            check_options(FleetOptions(**({"pool": "jobs", "handler": "m:f"} | changes)))


class TestHealth:
    def test_pauses_double_after_consecutive_failures_and_a_success_resets(self):
        health = WorkerHealth(HealthPolicy(failures_before_pause=2, pause=1.0, max_pause=3.0, recovery_pauses=10))
        pauses = []
        for _ in range(3):
            health.failure()
            health.failure()
            pauses.append(health.pause_seconds())
        assert pauses == [1.0, 2.0, 3.0]
        health.success()
        health.failure()
        assert health.pause_seconds() == 0.0

    def test_exhausted_after_the_recovery_budget(self):
        health = WorkerHealth(HealthPolicy(failures_before_pause=1, pause=0.1, recovery_pauses=2))
        for _ in range(2):
            health.failure()
            assert health.pause_seconds() > 0
        assert not health.exhausted
        health.failure()
        assert health.exhausted
        assert health.pause_seconds() == 0.0


class TestEventsAndProgress:
    def test_tally_counts_every_kind(self):
        sink = ListSink()
        for event in (
            ("done", 5),
            ("failed", 1),
            ("poisoned", 2),
            ("released", 3),
            ("rate_limited", "K1"),
            ("rate_limited", "K1"),
            ("disabled", "K2", "401"),
            ("worker", "w1"),
            ("worker_lost", "w1"),
            ("start", "w1", "i", 1),
        ):
            sink(*event)
        tally = Tally()
        for event in sink.events:
            tally.apply(event)
        assert (tally.done, tally.failed, tally.poisoned, tally.released) == (5, 1, 2, 3)
        assert tally.rate_limited == {"K1": 2} and tally.disabled == {"K2": "401"}
        assert (tally.workers_started, tally.workers_lost) == (1, 1)

    def _progress(self, **kw):
        base = dict(pool="p", elapsed=75.0, done=10, failed=0, poisoned=1, released=0, rate=2.0, eta=5.0)
        base |= dict(pending=8, delayed=1, claimed=1, processes=2, workers=4)
        return FleetProgress(**(base | kw))

    def test_line_shows_counts_rate_eta_and_429s_per_credential(self):
        line = format_line(self._progress(rate_limited={"KEY_2": 3, "KEY_1": 1}, disabled={"KEY_3": "401"}))
        assert "10 done" in line and "1 poisoned" in line and "10 left" in line
        assert "2.0/s, ETA 5s" in line and "429s KEY_1=1 KEY_2=3" in line and "disabled KEY_3" in line
        assert line.endswith("1m15s")

    def test_log_renderer_throttles_but_always_prints_the_final_state(self):
        out = io.StringIO()
        render = LogRenderer(out, interval=3600)
        render(self._progress())
        render(self._progress(done=11))
        render(self._progress(done=12, final=True))
        lines = out.getvalue().splitlines()
        assert len(lines) == 2 and "12 done" in lines[-1]

    def test_line_renderer_redraws_in_place(self):
        out = io.StringIO()
        render = LineRenderer(out)
        render(self._progress())
        render(self._progress(final=True))
        assert out.getvalue().count("\r") == 2 and out.getvalue().endswith("\n")

    def test_renderer_choice(self):
        assert renderer_for("none") is None
        assert isinstance(renderer_for("auto", io.StringIO()), LogRenderer)  # not a TTY
        assert isinstance(renderer_for("bar", io.StringIO()), LineRenderer)


class TestFleetBoundsAndSignature:
    @pytest.mark.parametrize(
        "changes, message",
        [
            ({"processes": 100_000}, "processes 100000 is over the limit of 256"),
            ({"concurrency": 1_000_000}, "concurrency 1000000 is over the limit of 20000"),
            ({"max_processes": 5000, "min_processes": 1}, "max_processes 5000 is over the limit"),
        ],
    )
    def test_a_huge_fleet_is_refused_naming_the_limit_and_the_flag(self, changes, message):
        with pytest.raises(ConfigError, match=message) as info:
            check_options(FleetOptions(pool="jobs", handler="m:f", **changes))
        assert "--allow-large-fleet" in str(info.value)

    def test_the_flag_lifts_the_limits(self):
        check_options(FleetOptions(pool="jobs", handler="m:f", concurrency=5000, allow_large_fleet=True))

    def test_a_handler_with_the_wrong_arity_is_refused_before_anything_runs(self, tmp_path, monkeypatch):
        (tmp_path / "arity_handlers.py").write_text(
            "def two(ctx, extra):\n    pass\n\ndef none():\n    pass\n\ndef defaulted(ctx, extra=1):\n    pass\n"
        )
        monkeypatch.syspath_prepend(str(tmp_path))
        for name in ("two", "none"):
            with pytest.raises(ConfigError, match=r"called with one argument, the item's context"):
                load_handler(f"arity_handlers:{name}")
        assert load_handler("arity_handlers:defaulted").spec == "arity_handlers:defaulted"


class TestIsolationGate:
    def test_an_exclusive_entrant_waits_for_the_running_and_holds_off_new_ones(self):
        from workhive.runtime.isolation import IsolationGate

        async def main() -> list[str]:
            gate = IsolationGate()
            order: list[str] = []
            release_first = asyncio.Event()
            first_started = asyncio.Event()

            async def ordinary(name: str, until: asyncio.Event | None = None) -> None:
                async with gate.shared():
                    order.append(f"{name} start")
                    first_started.set()
                    if until is not None:
                        await until.wait()
                    order.append(f"{name} end")

            async def alone() -> None:
                async with gate.exclusive():
                    order.append("suspect start")
                    assert gate.running == 1
                    order.append("suspect end")

            first = asyncio.create_task(ordinary("a", release_first))
            await first_started.wait()
            suspect = asyncio.create_task(alone())
            await asyncio.sleep(0)
            late = asyncio.create_task(ordinary("b"))  # arrives while the suspect waits
            for _ in range(10):
                await asyncio.sleep(0)
            assert order == ["a start"]  # neither the suspect nor b started beside a
            release_first.set()
            await asyncio.gather(first, suspect, late)
            return order

        assert asyncio.run(main()) == ["a start", "a end", "suspect start", "suspect end", "b start", "b end"]


class TestStatsGap:
    """How often the supervisor counts the pool: a share of the store's time, never past the drain."""

    def test_a_quick_read_is_repeated_at_the_base_interval(self):
        from workhive.runtime.supervisor import STATS_EVERY, stats_gap

        assert stats_gap(0.001, 10, None, None) == STATS_EVERY
        assert stats_gap(0.001, 10, 20, 0.2) == STATS_EVERY

    def test_a_slow_read_is_repeated_in_proportion_to_its_cost(self):
        from workhive.runtime.supervisor import STATS_COST_FACTOR, stats_gap

        # A pool not draining (nothing finished since the last read): the cost alone decides.
        assert stats_gap(0.15, 1_000_000, 1_000_000, 3.0) == pytest.approx(0.15 * STATS_COST_FACTOR)
        assert stats_gap(0.15, 1_000_000, None, None) == pytest.approx(0.15 * STATS_COST_FACTOR)

    def test_a_pool_about_to_drain_is_read_when_it_should_be_empty(self):
        from workhive.runtime.supervisor import STATS_EVERY, stats_gap

        # 10,000 items/s with 5,000 left: read again in 0.5 s, not after the 3 s the cost allows.
        assert stats_gap(0.15, 5_000, 35_000, 3.0) == pytest.approx(0.5)
        # ...but never more often than the base interval.
        assert stats_gap(0.15, 10, 35_000, 3.0) == STATS_EVERY
