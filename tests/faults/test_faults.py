"""The fault scenarios: a real ``workhive work`` fleet on every engine under a schedule of faults.

Each scenario pushes its items (plain ones, a few whose handler echoes the API
key, and the faults it is about), runs the fleet with ``--until-empty`` while
the nemesis injects its schedule, and then checks every item and every output
(see ``checker`` and ``drill``). A failure lists every problem found, each
naming the item, its state and the check, and the seed that replays it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from .conftest import record
from .drill import Drill, FleetSettings, Profile
from .engines import Target
from .nemesis import FAULTS, schedule

F = TypeVar("F", bound=Callable[..., Any])


def engines(*names: str) -> Callable[[F], F]:
    """Run the scenario on these engines only (of those selected)."""

    def mark(fn: F) -> F:
        fn.engines = names  # type: ignore[attr-defined]
        return fn

    return mark


class Items:
    """The scenario's items: plain ones, one in 20 a canary echo, and any fault items asked for."""

    def __init__(self, profile: Profile, seed: int, **faults: int) -> None:
        self.profile = profile
        self.rng = random.Random(seed)
        self.faults = faults  # fault name -> count in the first push
        self.n = 0

    def _make(self, count: int, fault: str | None = None) -> list[dict[str, Any]]:
        made = []
        for _ in range(count):
            self.n += 1
            made.append({"n": self.n} if fault is None else {"n": self.n, "fault": fault})
        return made

    def first(self) -> list[dict[str, Any]]:
        data = self._make(self.profile.items)
        for fault, count in self.faults.items():
            data += self._make(count, fault)
        return self._mixed(data)

    def wave(self) -> list[dict[str, Any]]:
        data = self._make(self.profile.wave)
        if "second_handle" in self.faults:
            data += self._make(self.profile.wave // 4, "second_handle")
        return self._mixed(data)

    def _mixed(self, data: list[dict[str, Any]]) -> list[dict[str, Any]]:
        data += self._make(max(1, len(data) // 20), "canary")
        self.rng.shuffle(data)  # faults spread through the pool
        return data


def _run(
    target: Target,
    scenario: str,
    profile: Profile,
    seed: int,
    kinds: list[str],
    *,
    settings: FleetSettings | None = None,
    extra_env: dict[str, str] | None = None,
    first: tuple[str, ...] = (),
    fault_items: dict[str, int] | None = None,
) -> None:
    rng = random.Random(seed)
    drill = Drill(target, scenario, profile, rng, settings or FleetSettings(), extra_env=extra_env or {})
    print(f"\n{target.engine}/{scenario}: WORKHIVE_FAULTS_SEED={seed} profile={profile.name}")
    items = Items(profile, seed, **(fault_items or {}))
    drill.push(items.first())
    plan = schedule(kinds, rng, profile.faults, first)
    if plan:
        drill.push_latch()  # only a schedule needs the pool held open until its last fault
    drill.run(plan, FAULTS, items.wave)
    record(target.engine, scenario, drill.injected, drill.items_checked, len(drill.problems))
    problem = drill.failure()
    if problem is not None:
        pytest.fail(f"{problem}\n(replay: WORKHIVE_FAULTS_SEED={seed} WORKHIVE_FAULTS_PROFILE={profile.name})")


def test_processes_killed_and_stopped(target: Target, profile: Profile, seed: int) -> None:
    """Workers and the supervisor SIGKILLed and SIGSTOPped, and the whole group SIGTERMed, mid-drain."""
    kinds = ["worker_kill", "worker_kill", "worker_stop", "supervisor_stop", "supervisor_kill"]
    # The group signal comes first, on a run nothing else has touched: any worker lost then is its fault.
    _run(target, "processes", profile, seed, kinds, first=("group_term",))


def test_handlers_that_raise_exit_and_crash(target: Target, profile: Profile, seed: int) -> None:
    """Handlers that raise, SystemExit, os._exit, SIGKILL themselves and segfault are poisoned with a reason."""
    settings = FleetSettings(max_attempts=2)
    each = profile.faults
    faults: dict[str, int] = {"raise": each, "exit": each, "os_exit": each, "signal": each, "segv": each}
    _run(target, "handlers", profile, seed, [], settings=settings, fault_items=faults)


@engines("postgres", "redis")
def test_server_killed_restarted_and_gone(target: Target, profile: Profile, seed: int) -> None:
    """The private server SIGKILLed and restarted mid-drain, then killed for good until the fleet gives up."""
    _run(target, "server", profile, seed, ["server_restart", "server_restart", "outage"])


@engines("postgres", "redis")
def test_connections_cut_stalled_delayed_and_half_open(target: Target, profile: Profile, seed: int) -> None:
    """The fleet's connections reset, frozen, slowed and half-opened by the proxy in front of the server."""
    kinds = ["proxy_cut", "proxy_cut", "proxy_stall", "proxy_delay", "proxy_half_open"]
    _run(target, "network", profile, seed, kinds)


@engines("sqlite")
def test_second_handles_and_short_lived_processes(target: Target, profile: Profile, seed: int) -> None:
    """Workers open and close a second handle on their own file while short-lived processes use it."""
    kinds = ["short_lived", "short_lived", "gap_short_lived", "worker_kill"]
    _run(
        target, "handles", profile, seed, kinds, first=("two_handles", "two_handles"),
        fault_items={"second_handle": max(10, profile.items // 4)},
    )  # fmt: skip


@engines("sqlite")
def test_wall_clock_steps(target: Target, profile: Profile, seed: int) -> None:
    """Every fleet process's wall clock stepped back and forth by minutes to an hour, mid-drain."""
    clock = target.workdir / "clock-shift"
    clock.write_text("0")
    kinds = ["clock_step", "clock_step", "clock_step", "worker_stop", "worker_kill"]
    _run(target, "clock", profile, seed, kinds, extra_env={"WORKHIVE_FAULTS_CLOCK_FILE": str(clock)})
