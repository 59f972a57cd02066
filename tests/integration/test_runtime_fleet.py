"""The fleet end to end on SQLite, run as a user would: a script calling ``run_fleet`` in a fresh interpreter."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import sys
import time
from pathlib import Path

import pytest

import workhive
from workhive.errors import ConfigError
from workhive.models import ItemState, WorkerStatus
from workhive.runtime import FleetOptions, run_fleet
from workhive.runtime.stop_requests import ECHO_WINDOW
from workhive.testing.processes import children_of

from .conftest import fleet_env, fleet_script, report_of

pytest.importorskip("workhive_sqlite")

TIMEOUT = 60


def fast(db: Path, **options):
    base = dict(
        pool="jobs",
        storage=f"sqlite:///{db}",
        locks=f"fcntl:///{db.parent / 'locks'}",  # the reaper's lock, beside the hive: never in the checkout
        lease=2.0,
        heartbeat=0.3,
        reap_after=1.5,
        grace=5.0,
        until_empty=True,
        progress="none",
    )
    return base | options


def push(url: str, items, **open_kw):
    async def go():
        async with workhive.open(url, **open_kw) as hive:
            return await hive.pool("jobs").push_many(items)

    return asyncio.run(go())


def items_of(url: str, ids):
    async def go():
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            return [await pool.get(i) for i in ids]

    return asyncio.run(go())


def workers_of(url: str):
    async def go():
        async with workhive.open(url) as hive:
            return await hive.workers.list()

    return asyncio.run(go())


def finish(proc, timeout=TIMEOUT):
    try:
        out, err = proc.communicate(timeout=timeout)
    except Exception:
        proc.kill()
        out, err = proc.communicate()
        raise AssertionError(f"fleet did not finish in time; stderr:\n{err[-3000:]}") from None
    return out, err


def test_bad_handler_is_a_config_error_before_anything_starts(tmp_path):
    for spec, message in [
        ("surely_missing_mod:run", "no module named"),
        ("json:nothing_here", "has no attribute"),
        ("json.decoder:__name__", "not a function"),
    ]:
        with pytest.raises(ConfigError, match=message):
            run_fleet(FleetOptions(pool="jobs", handler=spec, storage=f"sqlite:///{tmp_path / 'h.db'}"))


def test_push_200_run_until_empty_all_done_and_the_report_is_exact(tmp_path, run_script):
    db = tmp_path / "hive.db"
    url = f"sqlite:///{db}"
    ids = push(url, [{"n": i} for i in range(200)])
    proc = run_script(fleet_script(**fast(db, handler="handlers:echo_sync", processes=2, concurrency=2)))
    out, err = finish(proc)
    assert proc.returncode == 0, err
    report = report_of(out)
    assert report["done"] == 200 and report["failed"] == 0 and report["poisoned"] == 0
    assert report["exit_code"] == 0 and report["reason"] == "the pool drained"
    # Each process registers its workers one at a time, so one stopped because the pool drained
    # may have started fewer than --concurrency: the count must match what the hive recorded.
    records = workers_of(url)
    assert 1 <= len(records) <= 4 and all(r.status is WorkerStatus.STOPPED for r in records), records
    if report["workers_lost"] == 0:  # no worker was reaped, so none registered twice
        assert report["workers_started"] == len(records)
    else:
        assert report["workers_started"] >= len(records)
    items = items_of(url, ids)
    assert [i.result["n"] for i in items] == list(range(200))
    assert all(i.state is ItemState.DONE and i.attempts == 1 for i in items)


def test_a_crashing_item_is_poisoned_after_max_attempts_and_the_fleet_drains(tmp_path, run_script):
    db = tmp_path / "hive.db"
    url = f"sqlite:///{db}"
    data = [{"n": i, "crash": i == 7} for i in range(40)]
    ids = push(url, data, max_attempts=3)
    proc = run_script(fleet_script(**fast(db, handler="handlers:crashy", processes=2, max_attempts=3)))
    out, err = finish(proc)
    assert proc.returncode == 0, err
    report = report_of(out)
    items = items_of(url, ids)
    crashed = items[7]
    assert crashed.state is ItemState.POISONED and crashed.attempts == 3
    assert "died" in crashed.error
    assert all(i.state is ItemState.DONE and i.attempts == 1 for n, i in enumerate(items) if n != 7)
    assert report["done"] == 39 and report["poisoned"] == 1 and report["failed"] == 2


def test_sigterm_lets_in_flight_items_finish_releases_the_rest_and_deregisters(tmp_path, run_script):
    db = tmp_path / "hive.db"
    url = f"sqlite:///{db}"
    log = tmp_path / "handler.log"
    ids = push(url, [{"seconds": 1.5} for _ in range(10)])
    options = fast(db, handler="handlers:slow", processes=1, concurrency=2, until_empty=False)
    proc = run_script(fleet_script(**options), env=fleet_env(WORKHIVE_TEST_LOG=str(log)))
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and (not log.exists() or log.read_text().count("start") < 2):
        time.sleep(0.05)
    assert log.exists(), "the handler never started"
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == 0, err
    report = report_of(out)
    lines = log.read_text().splitlines()
    started = {line.split()[1] for line in lines if line.startswith("start")}
    ended = {line.split()[1] for line in lines if line.startswith("end")}
    assert started == ended and len(started) == 2  # in-flight items finished
    items = {i.id: i for i in items_of(url, ids)}
    assert all(items[i].state is ItemState.DONE for i in started)
    rest = [i for i in items.values() if i.id not in started]
    assert all(i.state is ItemState.PENDING and i.attempts == 0 for i in rest)  # no attempt spent
    assert report["done"] == 2 and report["reason"] == "stopped by SIGTERM"

    async def workers():
        async with workhive.open(url) as hive:
            return await hive.workers.list()

    assert {w.status for w in asyncio.run(workers())} == {WorkerStatus.STOPPED}


@pytest.mark.one_python
def test_chaos_random_sigkills_and_a_frozen_process_lose_nothing(tmp_path, run_script):
    rng = random.Random(20240607)
    db = tmp_path / "hive.db"
    url = f"sqlite:///{db}"
    ids = push(url, [{"n": i} for i in range(1000)], max_attempts=20)
    options = fast(db, handler="handlers:tokened", processes=3, max_attempts=20)
    # 20 ms per item keeps the run going for several seconds, so the chaos below always
    # lands mid-run however fast the interpreter is; it stops once it has done its damage.
    proc = run_script(fleet_script(**options), env=fleet_env(WORKHIVE_TEST_SLEEP="0.02"))
    kills = 0
    frozen = None
    deadline = time.monotonic() + 60
    while (kills < 3 or frozen is None) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(rng.uniform(0.2, 0.5))
        children = sorted(c for c in children_of(proc.pid) if c != frozen)
        if not children:
            continue  # processes still starting, or being restarted
        victim = rng.choice(children)
        if frozen is None:
            frozen = victim  # frozen past its lease and reap_after: its late completions must be refused
            os.kill(victim, signal.SIGSTOP)
            continue
        os.kill(victim, signal.SIGKILL)
        kills += 1
    if frozen is not None:
        time.sleep(max(0.0, 2.5))
        os.kill(frozen, signal.SIGCONT)
    out, err = finish(proc, timeout=TIMEOUT)
    assert proc.returncode == 0, err[-3000:]
    report = report_of(out)
    items = items_of(url, ids)
    assert all(i.state is ItemState.DONE for i in items), [i for i in items if i.state is not ItemState.DONE][:3]
    # The completion that won is always the item's latest claim: no late completion was accepted.
    assert all(i.result["token"] == i.token for i in items)
    assert report["poisoned"] == 0
    # A SIGKILL can land between a completion's commit and its report to the supervisor.
    assert 1000 - kills * 32 <= report["done"] <= 1000
    assert kills == 3 and frozen is not None, "the chaos never happened: the fleet ended first"


def test_a_killer_item_is_poisoned_and_the_innocents_beside_it_are_not(tmp_path, run_script):
    db = tmp_path / "hive.db"
    url = f"sqlite:///{db}"
    log = tmp_path / "handler.log"
    log.touch()
    data = [{"n": i, "killer": i == 0} for i in range(8)]
    # max_attempts=1: any attempt an innocent spent in the killer's crash would poison it.
    ids = push(url, data, max_attempts=1)
    options = fast(db, handler="handlers:killer_beside_innocents", processes=1, concurrency=4, max_attempts=1)
    env = fleet_env(WORKHIVE_TEST_LOG=str(log), WORKHIVE_TEST_MARKER=str(tmp_path / "fired"))
    proc = run_script(fleet_script(**options), env=env)
    out, err = finish(proc)
    assert proc.returncode == 0, err[-3000:]
    assert (tmp_path / "fired").exists(), "the killer never ran beside three innocents"
    items = items_of(url, ids)
    killer, innocents = items[0], items[1:]
    assert all(i.state is ItemState.DONE for i in innocents), [(i.id, i.state, i.error) for i in innocents]
    assert all(i.attempts == 1 for i in innocents)  # the crash beside the killer cost them nothing
    assert killer.state is ItemState.POISONED, killer
    assert "alone" in killer.error

    async def suspects():
        async with workhive.open(url) as hive:
            return await hive.shared("workhive-suspects").items()

    # Innocents that ran alone and lived are cleared; the killer stays marked.
    assert set(asyncio.run(suspects())) == {f"jobs/{killer.id}"}
    report = report_of(out)
    assert report["done"] == 7 and report["poisoned"] == 1


def _in_process_fleet(supervisor_class, db: Path, **options):
    from workhive.runtime.shared import open_hive

    opts = FleetOptions(**fast(db, **({"handler": "handlers:noop", "processes": 2} | options)))

    async def go():
        hive = open_hive(opts)
        await hive.open()
        try:
            supervisor = supervisor_class(opts, hive, None)
            return supervisor, await asyncio.wait_for(supervisor.run(), TIMEOUT)
        finally:
            await hive.close()

    return asyncio.run(go())


def test_a_child_that_dies_before_it_gets_its_configuration_is_replaced(tmp_path, monkeypatch):
    import subprocess
    import sys

    from workhive.runtime.supervisor import Supervisor

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    db = tmp_path / "hive.db"
    ids = push(f"sqlite:///{db}", [{"n": i} for i in range(20)])

    class DiesBeforeConfig(Supervisor):
        doomed = 0

        def _popen(self, cmd, pass_fds):
            if self.doomed < 2:
                # The child is dead before the supervisor writes its configuration: BrokenPipeError.
                self.doomed += 1
                proc = subprocess.Popen([sys.executable, "-c", "pass"], stdin=subprocess.PIPE)
                proc.wait()
                return proc
            return super()._popen(cmd, pass_fds)

    supervisor, report = _in_process_fleet(DiesBeforeConfig, db)
    assert supervisor.doomed == 2
    assert report.exit_code == 0 and report.reason == "the pool drained", report
    assert report.processes_replaced == 2  # said in the report, not only in the log
    assert report.done == 20
    assert all(i.state is ItemState.DONE for i in items_of(f"sqlite:///{db}", ids))


@pytest.mark.parametrize("fault", ["StorageError", "StorageCorrupt"])
def test_a_storage_fault_that_lasts_ends_the_run_with_one_reason(tmp_path, monkeypatch, caplog, fault):
    import workhive.errors as errors
    from workhive.runtime import supervisor as sup

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    monkeypatch.setattr(sup, "STORAGE_RETRY_MAX", 0.05)  # the mechanism, not the half minute of patience
    db = tmp_path / "hive.db"
    push(f"sqlite:///{db}", [{"n": 1}])
    calls = []

    class FailingStats(sup.Supervisor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.pool = BrokenStats(self.pool)

    class BrokenStats:
        def __init__(self, pool):
            self._pool = pool

        def __getattr__(self, name):
            return getattr(self._pool, name)

        async def stats(self):
            calls.append(1)
            raise getattr(errors, fault)("disk I/O error (the test's fault)")

    with caplog.at_level("WARNING", logger="workhive.runtime.supervisor"):
        _, report = _in_process_fleet(FailingStats, db)
    assert report.exit_code == 1, report
    assert "the test's fault" in report.reason
    expected = 1 if fault == "StorageCorrupt" else sup.MAX_STORAGE_FAILURES
    assert len(calls) == expected
    warned = [r for r in caplog.records if "reading pool statistics failed" in r.getMessage()]
    assert len(warned) <= 1


def _wait_for_stderr_line(proc, fragment: str, seen: list[str]) -> None:
    import select

    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 1.0)
        if ready:
            line = proc.stderr.readline()
            seen.append(line)
            if fragment in line:
                return
            if not line:
                break
    raise AssertionError(f"never saw {fragment!r} on stderr: {''.join(seen)[-3000:]}")


def test_after_a_second_sigterm_the_report_agrees_with_storage(tmp_path, run_script):
    db = tmp_path / "hive.db"
    url = f"sqlite:///{db}"
    log = tmp_path / "handler.log"
    ids = push(url, [{"seconds": 120} for _ in range(6)])
    options = fast(db, handler="handlers:slow", processes=1, concurrency=2, until_empty=False, grace=60.0)
    proc = run_script(fleet_script(**options), env=fleet_env(WORKHIVE_TEST_LOG=str(log)))
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline and (not log.exists() or log.read_text().count("start") < 2):
        time.sleep(0.05)
    assert log.exists() and log.read_text().count("start") == 2, "the handlers never started"
    seen: list[str] = []
    proc.send_signal(signal.SIGTERM)
    _wait_for_stderr_line(proc, "stopping", seen)  # the first signal is taken before the second is sent
    # Later than a repeat delivery of the first (timeout's signal to the process and its group) would
    # come: the supervisor took the first before "stopping" was written, so this pause is at least that long.
    time.sleep(ECHO_WINDOW + 0.5)
    proc.send_signal(signal.SIGTERM)
    out, err = finish(proc)
    assert proc.returncode == 130, "".join(seen) + err
    report = report_of(out)
    items = items_of(url, ids)
    # Storage: nothing left claimed, nothing failed; the two running items went back unspent.
    assert all(i.state is ItemState.PENDING and i.attempts == 0 for i in items), items
    # The report says the same.
    assert report["failed"] == 0 and report["poisoned"] == 0 and report["done"] == 0
    assert report["released"] == 2
    assert "2 in-flight or claimed item(s) put back without spending an attempt" in report["reason"]
    assert "expire" not in report["reason"]


def test_the_claims_of_a_dead_local_worker_are_released_without_waiting_for_reap_after(tmp_path, monkeypatch):
    import subprocess
    import sys

    from workhive.runtime.supervisor import Supervisor

    monkeypatch.setenv("PYTHONPATH", str(Path(__file__).parent))
    db = tmp_path / "hive.db"
    url = f"sqlite:///{db}"
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()

    async def leave_a_claim() -> str:
        async with workhive.open(url) as hive:
            await hive.pool("jobs").push({"n": 1})
            me = await hive.workers.register(pools=["jobs"], pid=gone.pid)
            claimed = await hive.pool("jobs").claim(me.worker_id, lease=3600)
            return claimed.id

    item_id = asyncio.run(leave_a_claim())
    # Nothing expires for an hour: only the dead PID can free the claim before the deadline.
    _, report = _in_process_fleet(Supervisor, db, lease=3600.0, reap_after=3600.0, heartbeat=1.0)
    assert report.exit_code == 0 and report.done == 1, report
    [item] = items_of(url, [item_id])
    assert item.state is ItemState.DONE


def test_max_attempts_applies_to_items_pushed_with_more(tmp_path, run_script):
    db = tmp_path / "hive.db"
    url = f"sqlite:///{db}"
    ids = push(url, [{"do": "boom"}], max_attempts=10)
    backoff = "none"
    proc = run_script(
        fleet_script(**fast(db, handler="handlers:signals", processes=1, max_attempts=2, backoff=backoff))
    )
    out, err = finish(proc)
    assert proc.returncode == 0, err[-3000:]
    [item] = items_of(url, ids)
    assert item.state is ItemState.POISONED and item.attempts == 2, item
    assert "max_attempts" in item.error
    assert report_of(out)["poisoned"] == 1


def test_sigterm_while_a_large_fleet_starts_stops_the_spawning(tmp_path, monkeypatch):
    import subprocess

    from workhive.runtime.supervisor import Supervisor

    db = tmp_path / "hive.db"
    push(f"sqlite:///{db}", [{"n": 1}])

    class CountingSpawns(Supervisor):
        spawned = 0

        def _popen(self, cmd, pass_fds):
            # A stand-in child that costs nothing: it waits on its stdin and dies on SIGTERM.
            self.spawned += 1
            if self.spawned == 3:
                os.kill(os.getpid(), signal.SIGTERM)  # the operator gives up while children start
            return subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, pass_fds=pass_fds)

    supervisor, report = _in_process_fleet(CountingSpawns, db, processes=200, until_empty=False)
    assert report.reason == "stopped by SIGTERM", report
    assert supervisor.spawned < 200  # the signal was handled between spawns, not after all of them
    assert not supervisor.children


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs under tmp_path (needs root's mount; skipped where it cannot be had)."""
    import subprocess

    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True)


@pytest.mark.one_python
def test_a_disk_that_fills_mid_run_ends_the_fleet_with_one_reason_and_loses_nothing(small_disk, run_script):
    db = small_disk / "hive.db"
    url = f"sqlite:///{db}"
    ids = push(url, [{"n": i} for i in range(300)])  # 300 results of 16 KB: about 5 MiB, on a 1 MiB disk
    proc = run_script(fleet_script(**fast(db, handler="handlers:bulky", processes=1, concurrency=2)))
    out, err = finish(proc)
    assert proc.returncode == 1, err[-3000:]
    report = report_of(out)
    assert "storage kept failing" in report["reason"] and "full" in report["reason"], report
    warnings = [line for line in err.splitlines() if " WARNING " in line or " ERROR " in line]
    assert len(warnings) < 20, "\n".join(warnings)  # a few lines, not one per retry
    items = items_of(url, ids)
    assert len(items) == 300 and all(i is not None for i in items)  # nothing lost
    done = [i for i in items if i.state is ItemState.DONE]
    assert 0 < len(done) < 300 and all(i.result["n"] == int(i.data["n"]) for i in done)


def test_worker_processes_keep_the_parents_import_order(tmp_path, monkeypatch):
    # A directory the parent appended to sys.path (after site-packages) holds a module named like
    # an installed package. The children must find the installed one first, as the parent does:
    # put on PYTHONPATH, that directory would shadow it and every child would die at start-up.
    late = tmp_path / "late"
    late.mkdir()
    (late / "attrs.py").write_text("raise ImportError('the shadowing attrs.py was imported')\n")
    (late / "late_handlers.py").write_text("def noop(ctx):\n    return None\n")
    monkeypatch.setattr(sys, "path", [*sys.path, str(late)])  # appended, as a script's sys.path.append
    db = tmp_path / "hive.db"
    ids = push(f"sqlite:///{db}", [{"n": i} for i in range(5)])
    report = run_fleet(FleetOptions(**fast(db, handler="late_handlers:noop", processes=1)))
    assert report.exit_code == 0 and report.done == 5, report
    assert all(i.state is ItemState.DONE for i in items_of(f"sqlite:///{db}", ids))
