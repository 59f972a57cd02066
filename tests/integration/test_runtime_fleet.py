"""The fleet end to end on SQLite, run as a user would: a script calling ``run_fleet`` in a fresh interpreter."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from pathlib import Path

import pytest

import workhive
from workhive.errors import ConfigError
from workhive.models import ItemState, WorkerStatus
from workhive.runtime import FleetOptions, run_fleet

from .conftest import fleet_env, fleet_script, report_of

pytest.importorskip("workhive_sqlite")

TIMEOUT = 60


def fast(db: Path, **options):
    base = dict(
        pool="jobs",
        storage=f"sqlite:///{db}",
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


def children_of(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found


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
    assert report["workers_started"] in (2, 4)  # a process may start after the pool drained
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
