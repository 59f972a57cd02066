"""One scenario end to end: push, run the fleet under the nemesis's schedule, then check everything.

``Drill.run(schedule)`` pushes the items, starts ``workhive work --until-empty``
and the ``Watcher``, and injects each fault of the schedule when the pool has
finished the fault's share of the items (progress, not time, decides when). A
*latch* item holds the pool open until the last fault has landed, so every
fault meets a running fleet however fast or slow the machine is; then the
latch is let go and the fleet must drain and exit by itself.

Everything that goes wrong is collected as one line naming the item, its state
and the check (``problems``), and the test fails with all of them at once. A
run is abandoned (its processes killed) only when it cannot end: a claim held
past the watcher's bound, no movement for ``stall`` seconds, or the profile's
hard cap.
"""

from __future__ import annotations

import collections
import json
import os
import random
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs

import workhive
from workhive.errors import WorkhiveError
from workhive.models import PoolStats, WorkItem

from . import checker
from .engines import Target
from .fault_handlers import expected_result
from .fleetrun import FleetRun
from .servers import PrivatePostgres
from .watcher import Watcher

__all__ = ["Abandon", "Drill", "FleetSettings", "Profile"]

HERE = Path(__file__).parent
POOL = "jobs"
#: the worker id the test process claims the latch under (never registered: no reaper touches it)
LATCH_HOLDER = "faults-latch-holder"
POLL = 0.05


class Abandon(Exception):
    """The run cannot end by itself; the message says why."""


@attrs.frozen
class Profile:
    """How big a scenario is: the default for ``make test``, ``soak`` for a manual soak."""

    name: str
    items: int  # plain items pushed before the fleet starts (fault items come on top)
    wave: int  # plain items pushed right before each fault, so that it lands on a busy pool
    faults: int  # how many times each scenario's fault schedule is repeated
    sleep: float  # seconds each plain item's handler takes
    run_cap: float  # the longest one fleet run may take before it is abandoned, however it moves

    @classmethod
    def from_env(cls) -> Profile:
        name = os.environ.get("WORKHIVE_FAULTS_PROFILE", "default")
        if name == "soak":
            return cls("soak", items=1000, wave=300, faults=5, sleep=0.01, run_cap=3600.0)
        if name == "default":
            return cls("default", items=40, wave=40, faults=1, sleep=0.03, run_cap=600.0)
        raise ValueError(f"WORKHIVE_FAULTS_PROFILE={name!r}: use default or soak")


@attrs.frozen
class FleetSettings:
    """The ``workhive work`` options of a scenario: short leases so faults settle quickly."""

    processes: int = 2
    concurrency: int = 3
    lease: float = 2.0
    heartbeat: float = 0.4
    reap_after: float = 3.0
    grace: float = 2.0
    max_attempts: int = 20

    def args(self) -> list[str]:
        return [
            "--processes", str(self.processes), "--concurrency", str(self.concurrency),
            "--lease", f"{self.lease:g}", "--heartbeat", f"{self.heartbeat:g}",
            "--reap-after", f"{self.reap_after:g}", "--grace", f"{self.grace:g}",
            "--max-attempts", str(self.max_attempts),
        ]  # fmt: skip


@attrs.define(eq=False)
class Drill:
    """See the module docstring."""

    target: Target
    scenario: str
    profile: Profile
    rng: random.Random
    settings: FleetSettings = FleetSettings()
    #: the fleet runs in this state of the world: extra environment (the clock shim)
    extra_env: dict[str, str] = attrs.field(factory=dict)
    pushed: dict[str, Any] = attrs.field(factory=dict)
    runs: list[FleetRun] = attrs.field(factory=list)
    problems: list[str] = attrs.field(factory=list)
    injected: collections.Counter[str] = attrs.field(factory=collections.Counter)
    outputs: list[tuple[str, str]] = attrs.field(factory=list)  # (where, text) of every process the drill ran
    latch_id: str | None = None
    #: the latch's claim, held by the test process until ``release_latch``; the run it was completed in
    latch: WorkItem | None = None
    latch_done_in: FleetRun | None = None
    #: processes the nemesis started beside the fleet (``two_handles``): stopped before the latch goes
    helpers: list[subprocess.Popen[str]] = attrs.field(factory=list)
    items_checked: int = 0
    watcher: Watcher = attrs.field(init=False)
    _baseline: PoolStats | None = None

    def __attrs_post_init__(self) -> None:
        # The test process's one handle on the store (see Watcher.call); claims are timed
        # from the first fleet run on.
        self.watcher = Watcher(self.target.direct_url, POOL, self.claim_bound)
        self.watcher.start()

    # -- bounds -------------------------------------------------------------------------
    @property
    def claim_bound(self) -> float:
        """Lease + the storage's retry window + a grace generous enough for a loaded machine."""
        return self.settings.lease + self.target.retry_for + max(30.0, 10 * self.settings.lease)

    @property
    def stall(self) -> float:
        return self.claim_bound + 30.0

    @property
    def give_up_bound(self) -> float:
        """How long a fleet may take to give up on storage that is gone: its retry window, the
        in-flight items' grace, a lease, and a minute of slack for the machine's load."""
        return self.target.retry_for + self.settings.grace + self.settings.lease + 60.0

    # -- the environment every process of the drill gets ----------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        paths = [str(HERE)]
        if "WORKHIVE_FAULTS_CLOCK_FILE" in self.extra_env:
            paths.insert(0, str(HERE / "clockshim"))
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [*paths, env.get("PYTHONPATH", "")]))
        env["FAULTKEY"] = checker.CANARY
        env["WORKHIVE_FAULTS_STORAGE"] = self.target.fleet_url
        env["WORKHIVE_FAULTS_LATCH"] = str(self.target.workdir / "latch")
        env["WORKHIVE_FAULTS_SLEEP"] = f"{self.profile.sleep:g}"
        env.update(self.extra_env)
        return env

    # -- items ----------------------------------------------------------------------------
    def push(self, data: list[Any]) -> None:
        async def go(hive: workhive.Hive) -> list[str]:
            return await hive.pool(POOL).push_many(data)

        ids = self.watcher.call(go)
        self.pushed.update(zip(ids, data))

    def push_latch(self) -> None:
        """Push the latch and claim it here, for a day: the fleet cannot run it, so it holds no slot
        of a worker process (where crash suspects would wait behind it to run alone)."""
        data = {"n": -1, "fault": "latch"}

        async def go(hive: workhive.Hive) -> WorkItem:
            pool = hive.pool(POOL)
            latch_id = await pool.push(data, priority=1_000_000)  # before the fleet starts: first in line
            (held,) = await pool.claim_many(1, LATCH_HOLDER, lease=86_400)
            assert held.id == latch_id, f"claimed {held.id}, not the latch {latch_id}"
            return held

        self.latch = self.watcher.call(go)
        self.pushed[self.latch.id] = data
        self.latch_id = self.latch.id

    def finish_helpers(self) -> None:
        """Stop the helper processes (they finish their round and close their handles); their items join."""
        (self.target.workdir / "helpers-stop").touch()
        for proc in self.helpers:
            try:
                out, err = proc.communicate(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, err = proc.communicate()
            self.outputs += [("two-handles helper stdout", out), ("two-handles helper stderr", err)]
            for line in out.splitlines():
                pushed = json.loads(line)
                self.pushed[pushed["id"]] = pushed["data"]
            if proc.returncode != 0:
                self.problems.append(f"[two handles] the helper process exited {proc.returncode}: {err[-1500:]}")
        self.helpers.clear()

    def release_latch(self) -> None:
        self.finish_helpers()  # no item is pushed once the pool may drain
        (self.target.workdir / "latch").touch()
        latch, self.latch = self.latch, None
        if latch is not None:
            result = {"token": latch.token, "digest": expected_result(latch.id, latch.token, self.pushed[latch.id])}

            async def go(hive: workhive.Hive) -> None:
                await hive.pool(POOL).complete(latch, result)

            self.watcher.call(go)
            self.latch_done_in = self.current  # its report cannot count it: the test completed it
        if self.latch_id is not None:
            self.watcher.exempt.discard(self.latch_id)

    def stats(self) -> PoolStats:
        async def go(hive: workhive.Hive) -> PoolStats:
            return await hive.pool(POOL).stats()

        return self.watcher.call(go)

    # -- fleet runs -----------------------------------------------------------------------
    @property
    def current(self) -> FleetRun:
        return self.runs[-1]

    def start_fleet(self) -> FleetRun:
        """A new ``workhive work --until-empty`` run; the store's counts now are its report's baseline."""
        try:
            self._baseline = self.stats()
        except WorkhiveError as exc:
            raise Abandon(f"the store cannot be read before a new fleet run: {type(exc).__name__}: {exc}") from exc
        args = [
            "--storage", self.target.fleet_url, "work", POOL, "--handler", "fault_handlers:handle",
            "--credentials", "env:FAULTKEY", "--until-empty", "--progress", "none", "--json",
            *self.settings.args(),
        ]  # fmt: skip
        run = FleetRun.start(args, self.target.workdir, self.env(), f"{self.scenario}-run{len(self.runs) + 1}")
        run.baseline = self._baseline
        self.runs.append(run)
        if len(self.runs) == 1:
            self.watcher.resume()
        return run

    def wait_until(self, ready: Callable[[], bool], what: str, cap: float | None = None) -> None:
        """Poll ``ready`` while the run may still end by itself; ``Abandon`` when it cannot."""
        started = time.monotonic()
        cap = self.profile.run_cap if cap is None else cap
        while not ready():
            if self.watcher.held:
                bound = self.claim_bound
                raise Abandon("; ".join(h.describe(bound) for h in self.watcher.held.values()))
            if self.watcher.remaining != 0 and self.watcher.stalled_for() > self.stall:
                raise Abandon(
                    f"no item finished for {self.watcher.stalled_for():.0f}s while waiting for {what} "
                    f"({self.watcher.remaining} item(s) left)"
                )
            if time.monotonic() - started > cap:
                raise Abandon(f"{what} did not happen within {cap:.0f}s although the pool kept moving")
            time.sleep(POLL)

    def settle_run(self, run: FleetRun, expect: int, why: str) -> None:
        """After ``run`` exited: its exit status, its report against the store, its output kept for the canary."""
        self.outputs += [(f"{run.name} stdout", run.stdout()), (f"{run.name} stderr", run.stderr())]
        if run.returncode != expect:
            self.problems.append(
                f"[exit status] {run.name} ({why}) exited {run.returncode}, expected {expect}; stderr: {run.tail()}"
            )
        report = run.report()
        if report is None:
            self.problems.append(f"[report] {run.name} ({why}) printed no JSON report; stderr: {run.tail()}")
            return
        if expect == 0 and run.returncode == 0:
            baseline: PoolStats = run.baseline
            now = self.stats()
            for field in ("done", "poisoned"):
                stored = getattr(now, field) - getattr(baseline, field)
                if field == "done" and self.latch_done_in is run:
                    stored -= 1  # the latch, completed by the test, not by the fleet
                if report.get(field) != stored:
                    self.problems.append(
                        f"[report] {run.name} ({why}) reports {field}={report.get(field)} but the store gained "
                        f"{stored} {field} item(s) during the run"
                    )

    def replace_dead_run(self) -> None:
        """A run that ended by itself while faults were still to come is a problem; a new one carries on."""
        run = self.current
        if run.running():
            return
        with self.watcher.paused():
            self.wait_orphans(run)
            self.outputs += [(f"{run.name} stdout", run.stdout()), (f"{run.name} stderr", run.stderr())]
            self.problems.append(
                f"[died] {run.name} exited {run.returncode} while the pool was held open (faults to come), "
                f"report {run.report()}; stderr: {run.tail()}"
            )
            self.start_fleet()

    def wait_orphans(self, run: FleetRun) -> None:
        """The worker processes of a run whose supervisor died must drain and exit by themselves."""
        bound = self.settings.grace + 60.0
        deadline = time.monotonic() + bound
        while run.orphans() and time.monotonic() < deadline:
            time.sleep(POLL)
        left = run.orphans()
        if left:
            self.problems.append(
                f"[orphans] worker processes {left} of {run.name} still ran {bound:.0f}s after their supervisor died"
            )
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass

    # -- the whole scenario ----------------------------------------------------------------
    def run(
        self,
        schedule: list[tuple[float, str]],
        faults: dict[str, Callable[[Drill], None]],
        wave: Callable[[], list[Any]] = list,
    ) -> None:
        """Run the fleet under ``schedule`` and check everything.

        Before each fault, ``wave()``'s items are pushed; the fault lands once the given
        share of them has finished, so it meets a busy fleet with claims and acks in flight.
        """
        if self.latch_id is not None:
            self.watcher.exempt.add(self.latch_id)
        try:
            self.start_fleet()
            try:
                for share, name in schedule:
                    before = self.watcher.finished
                    items = wave()
                    try:
                        self.push(items)
                    except WorkhiveError as exc:
                        raise Abandon(f"pushing a wave of items failed: {type(exc).__name__}: {exc}") from exc
                    threshold = before + int(share * len(items))

                    def reached(t: int = threshold) -> bool:
                        self.replace_dead_run()
                        return self.watcher.finished >= t or self.watcher.remaining <= 1

                    self.wait_until(
                        reached,
                        f"{threshold} items finished before fault {name}",
                    )
                    faults[name](self)
                    self.injected[name] += 1
                self.release_latch()
                self.wait_until(lambda: not self.current.running(), f"{self.current.name} to exit (--until-empty)")
                self.settle_run(self.current, 0, "the final drain")
            except Abandon as exc:
                run = self.current
                left = self.watcher.remaining
                run.kill_all()
                self.outputs += [(f"{run.name} stdout", run.stdout()), (f"{run.name} stderr", run.stderr())]
                self.problems.append(
                    f"[until-empty] {run.name} never exited ({left} item(s) left): {exc}; stderr: {run.tail()}"
                )
        finally:
            for run in self.runs:
                if run.running() or run.orphans():
                    run.kill_all()
            self.release_latch()
        try:
            self.check_store()
        finally:
            self.watcher.stop()

    def check_store(self) -> None:
        """Every item, every stored row and every output, once the fleet is gone."""
        self.items_checked = len(self.pushed)
        try:
            stored = self.watcher.call(lambda hive: checker.read_items(hive, POOL))
            server = self.target.server
            dsn = server.dsn() if isinstance(server, PrivatePostgres) else None
            texts = self.watcher.call(lambda hive: checker.stored_text(hive, stored, dsn, self.target.namespace))
        except WorkhiveError as exc:
            self.problems.append(f"[store] the store cannot be read back after the run: {type(exc).__name__}: {exc}")
            stored, texts = {}, []
        else:
            self.problems += checker.check_items(self.pushed, stored)
        self.problems += checker.canary_leaks([*self.outputs, *texts], self.target.stored_files)

    def failure(self) -> str | None:
        """The test's failure message (every problem, one a line), or None when all is well."""
        if not self.problems:
            return None
        shown = self.problems[:40]
        more = f"\n… and {len(self.problems) - len(shown)} more" if len(self.problems) > len(shown) else ""
        return (
            f"{self.target.engine}/{self.scenario}: {len(self.problems)} problem(s) after faults "
            f"{dict(self.injected)} on {self.items_checked} items:\n" + "\n".join(shown) + more
        )
