"""A signal to the whole process group of ``workhive work`` (what ``timeout`` and Ctrl-C send) is one request to stop.

The worker processes run in sessions of their own, so the group signal reaches the supervisor alone,
which tells each of them once: the in-flight items finish within the grace period, the rest go back
without spending an attempt, and the exit status is the graceful one, not 130.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

import workhive
from workhive.models import ItemState, WorkItem

from .cli_helpers import COMMAND, clean_env
from .cli_helpers import workhive as run_workhive
from .conftest import HERE

pytest.importorskip("workhive_sqlite")

TIMEOUT = 120


def _items(db: Path) -> list[WorkItem]:
    async def read() -> list[WorkItem]:
        async with workhive.open(f"sqlite:///{db}", create=False) as hive:
            pool = hive.pool("jobs")
            return [i for state in ItemState for i in await pool.items(state, limit=100)]

    return asyncio.run(read())


def test_sigterm_to_the_process_group_stops_the_fleet_gracefully_once(tmp_path: Path) -> None:
    log = tmp_path / "handler.log"
    env = {"PYTHONPATH": str(HERE), "WORKHIVE_TEST_LOG": str(log)}
    items = "".join(json.dumps({"seconds": 2}) + "\n" for _ in range(8))
    pushed = run_workhive(tmp_path, "--storage", "sqlite:///hive.db", "push", "jobs", "-", stdin=items, **env)
    assert pushed.code == 0, pushed
    proc = subprocess.Popen(
        [*COMMAND, "--storage", "sqlite:///hive.db", "work", "jobs", "--handler", "handlers:slow",
         "--processes", "2", "--grace", "60", "--progress", "none", "--json"],
        cwd=tmp_path, env=clean_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True,  # a group of its own, as a shell gives a job (and never the test runner's)
    )  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and (not log.exists() or log.read_text().count("start") < 2):
            time.sleep(0.05)
        assert log.exists() and log.read_text().count("start") == 2, "the handlers never started"
        os.killpg(proc.pid, signal.SIGTERM)  # every process of the group, as `timeout` and Ctrl-C do
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    report = json.loads(out)
    assert report["reason"] == "stopped by SIGTERM", report
    assert "interrupted" not in err and "exit status 130" not in err, err[-3000:]
    assert "the same request" not in err  # the group signal reached the supervisor once: nothing to merge
    lines = log.read_text().splitlines()
    started = {line.split()[1] for line in lines if line.startswith("start")}
    ended = {line.split()[1] for line in lines if line.startswith("end")}
    assert started == ended and len(started) == 2  # the in-flight items had their grace period
    items = _items(tmp_path / "hive.db")
    assert len(items) == 8
    assert all(i.state is ItemState.DONE and i.attempts == 1 for i in items if i.id in started), items
    # As for one SIGTERM: the others were given back (or never claimed) without spending an attempt.
    assert all(i.state is ItemState.PENDING and i.attempts == 0 for i in items if i.id not in started), items
    assert report["done"] == 2 and report["failed"] == 0 and report["poisoned"] == 0


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited (whoever adopted it may not reap it at once)


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_worker_processes_out_of_the_group_still_stop_when_the_supervisor_dies(
    tmp_path: Path, start_method: str
) -> None:
    log = tmp_path / "handler.log"
    env = {"PYTHONPATH": str(HERE), "WORKHIVE_TEST_LOG": str(log)}
    items = "".join(json.dumps({"seconds": 1}) + "\n" for _ in range(6))
    pushed = run_workhive(tmp_path, "--storage", "sqlite:///hive.db", "push", "jobs", "-", stdin=items, **env)
    assert pushed.code == 0, pushed
    proc = subprocess.Popen(
        [*COMMAND, "--storage", "sqlite:///hive.db", "work", "jobs", "--handler", "handlers:slow",
         "--processes", "2", "--grace", "60", "--progress", "none", "--start-method", start_method],
        cwd=tmp_path, env=clean_env(**env), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    children: list[int] = []
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and (not log.exists() or log.read_text().count("start") < 2):
            time.sleep(0.05)
        assert log.exists() and log.read_text().count("start") == 2, "the handlers never started"
        children = _children(proc.pid)
        assert len(children) == 2
        proc.kill()  # the supervisor alone: its worker processes are in sessions of their own
        proc.wait(timeout=TIMEOUT)
        while time.monotonic() < deadline and any(_running(pid) for pid in children):
            time.sleep(0.05)
        assert not any(_running(pid) for pid in children), "worker processes outlived their supervisor"
    finally:
        for pid in children:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)
    # They drained as on SIGTERM: the items in flight finished, the rest went back unspent.
    items_left = _items(tmp_path / "hive.db")
    started = {line.split()[1] for line in log.read_text().splitlines() if line.startswith("start")}
    assert all(i.state is ItemState.DONE for i in items_left if i.id in started), items_left
    assert all(i.state is ItemState.PENDING and i.attempts == 0 for i in items_left if i.id not in started), items_left
