"""One storage × locks pair, end to end through the CLI: push → work → status, and SIGKILL chaos.

The light tests run for every pair; the chaos test is heavy and runs where the
tox env sets ``WORKHIVE_FLEET_HEAVY=1`` (once per storage engine).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from typing import Any

import pytest

import workhive
from workhive.models import ItemState, WorkItem
from workhive.testing.processes import children_of

from .conftest import HERE, Target

DEADLINE = 240.0  # generous: CI machines are shared; nothing here measures time


def items(target: Target, ids: list[str]) -> list[WorkItem]:
    async def go() -> list[WorkItem]:
        async with workhive.open(target.storage) as hive:
            pool = hive.pool("jobs")
            return [await pool.get(i) for i in ids]

    return asyncio.run(go())


def done_count(target: Target) -> int:
    async def go() -> int:
        async with workhive.open(target.storage) as hive:
            return (await hive.pool("jobs").stats()).done

    return asyncio.run(go())


def push(target: Target, n: int, **fields: Any) -> list[str]:
    lines = "".join(json.dumps({"n": i, **fields}) + "\n" for i in range(n))
    result = target.cli("push", "jobs", "-", "--json", input=lines)
    assert result.returncode == 0, result.stderr

    async def go() -> list[str]:
        async with workhive.open(target.storage) as hive:
            pending = await hive.pool("jobs").items("pending", limit=n)
            return [i.id for i in pending]

    ids = asyncio.run(go())
    assert len(ids) == n
    return ids


def test_push_work_status_every_item_done_once_under_the_fleet_lock(target: Target) -> None:
    log = target.workdir / "critical.log"
    ids = push(target, 120, meet=2)
    os.environ["WORKHIVE_FLEET_LOG"] = str(log)
    try:
        work = target.cli(
            "work", "jobs", "--handler", "fleet_handlers:locked", "--processes", "2", "--concurrency", "3",
            "--lease", "30", "--heartbeat", "2", "--until-empty", "--progress", "none", "--json",
            timeout=DEADLINE,
        )  # fmt: skip
    finally:
        del os.environ["WORKHIVE_FLEET_LOG"]
    assert work.returncode == 0, work.stderr[-3000:]

    status = target.cli("status", "jobs", "--json")
    assert status.returncode == 0, status.stderr
    [pool] = json.loads(status.stdout)["pools"]
    assert (pool["pool"], pool["done"], pool["pending"], pool["claimed"], pool["poisoned"]) == ("jobs", 120, 0, 0, 0)

    stored = items(target, ids)
    assert all(i.state is ItemState.DONE and i.attempts == 1 for i in stored)
    assert all(i.result["token"] == i.token for i in stored)

    # The lock held across processes: critical sections never overlap, and the fencing
    # token rises with every acquisition in the order the sections ran.
    lines = [line.split() for line in log.read_text().splitlines()]
    assert len(lines) == 240
    tokens = []
    for enter, leave in zip(lines[::2], lines[1::2]):
        assert enter[0] == "enter" and leave[0] == "exit", (enter, leave)
        assert enter[1:] == leave[1:], f"another holder entered inside {enter}: {leave}"
        tokens.append(int(enter[1]))
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens), tokens
    assert len({line[2] for line in lines}) == 2, "both worker processes should have taken the lock"


@pytest.mark.skipif(os.environ.get("WORKHIVE_FLEET_HEAVY") != "1", reason="heavy: runs once per storage engine")
def test_sigkilled_worker_processes_lose_nothing_and_no_late_completion_wins(target: Target) -> None:
    ids = push(target, 400)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    env["WORKHIVE_LOCKS"] = target.locks
    env["WORKHIVE_FLEET_SLEEP"] = "0.01"  # keeps the run going long enough for the kills to land mid-run
    proc = subprocess.Popen(
        [sys.executable, "-m", "workhive", "--storage", target.storage, "work", "jobs",
         "--handler", "fleet_handlers:tokened", "--processes", "2", "--concurrency", "2",
         "--lease", "2", "--heartbeat", "0.3", "--reap-after", "1.5", "--max-attempts", "20",
         "--until-empty", "--progress", "none", "--json"],
        cwd=target.workdir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    kills = 0
    deadline = time.monotonic() + DEADLINE
    try:
        # Progress-driven: each kill waits for more items to be done, so it lands mid-run.
        for threshold in (60, 160, 260):
            while time.monotonic() < deadline and proc.poll() is None and done_count(target) < threshold:
                time.sleep(0.05)
            victims = children_of(proc.pid)
            if proc.poll() is None and victims:
                os.kill(victims[0], signal.SIGKILL)
                kills += 1
        _out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err[-3000:]
    assert kills == 3, "the chaos never happened: the fleet ended first"
    stored = items(target, ids)
    assert all(i.state is ItemState.DONE for i in stored), [i for i in stored if i.state is not ItemState.DONE][:3]
    # The completion that won is always the item's latest claim: no stale completion was accepted.
    assert all(i.result["token"] == i.token for i in stored)
