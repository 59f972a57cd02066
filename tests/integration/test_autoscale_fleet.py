"""``workhive work --processes auto``: a real fleet grows under backlog, shrinks when idle, and stays at
the keys' budget bound. Observed through the hive (the live workers' processes), never by timing."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

import workhive
from workhive.models import WorkerStatus
from workhive.testing.environment import workhive_free_env

from .cli_helpers import COMMAND

pytest.importorskip("workhive_sqlite")
pytestmark = pytest.mark.one_python  # whole fleets: once in the Python matrix

HERE = Path(__file__).parent
#: the longest a fleet may take to show what a test waits for (a hung fleet fails; a slow one does not)
PATIENCE = 240.0


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = workhive_free_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    env["AUTOSCALE_RELEASE"] = str(tmp_path / "release")
    env.update(extra)
    return env


async def _observe(url: str) -> tuple[int, int]:
    """(worker processes with a live worker, items done), as the hive records them."""
    async with workhive.open(url, create=False) as hive:
        workers = await hive.workers.list()
        live = {w.pid for w in workers if w.status not in (WorkerStatus.STOPPED, WorkerStatus.LOST)}
        return len(live), (await hive.pool("jobs").stats()).done


def _wait_for(url: str, proc: subprocess.Popen[str], what: str, ok: Callable[[int, int], bool]) -> list[int]:
    """Poll the hive until ``ok(processes, done)``; returns every process count seen. Fails after PATIENCE."""
    seen: list[int] = []
    deadline = time.monotonic() + PATIENCE
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"the fleet exited ({proc.returncode}) before {what}: {proc.stderr.read()}"
        processes, done = asyncio.run(_observe(url))
        seen.append(processes)
        if ok(processes, done):
            return seen
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what}; process counts seen: {seen[-20:]}")


def _push(url: str, count: int) -> None:
    async def push() -> None:
        async with workhive.open(url) as hive:
            await hive.pool("jobs").push_many([{"n": n} for n in range(count)])

    asyncio.run(push())


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(PATIENCE)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_auto_grows_under_backlog_to_max_and_shrinks_to_min_when_idle(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/hive.db"
    _push(url, 30)
    proc = subprocess.Popen(
        [*COMMAND, "--storage", url, "work", "jobs", "--handler", "autoscale_handlers:hold",
         "--processes", "auto:1-3", "--progress", "none", "--heartbeat", "1", "--lease", "60"],
        cwd=tmp_path, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # Every held item keeps its worker busy: the backlog can only be met by growing.
        seen = _wait_for(url, proc, "three worker processes", lambda processes, _: processes == 3)
        assert max(seen) <= 3
        (tmp_path / "release").touch()
        seen = _wait_for(url, proc, "the pool drained", lambda _, done: done == 30)
        seen += _wait_for(url, proc, "one worker process left", lambda processes, _: processes == 1)
        assert max(seen) <= 3
    finally:
        _stop(proc)
    assert proc.returncode == 0, proc.stderr.read()


def test_auto_stays_at_the_budget_bound_when_the_keys_are_the_limit(tmp_path: Path) -> None:
    pytest.importorskip("workhive_env_credentials")
    url = f"sqlite:///{tmp_path}/hive.db"
    _push(url, 40)
    # 120 requests a minute: 2 calls a second for the whole fleet. Calls return at once, so one
    # worker spends the whole budget (Little's law), however much backlog waits.
    proc = subprocess.Popen(
        [*COMMAND, "--storage", url, "work", "jobs", "--handler", "autoscale_handlers:quick",
         "--processes", "auto:1-3", "--credentials", "env:AUTOSCALE_KEY?rpm=120", "--progress", "none"],
        cwd=tmp_path, env=_env(tmp_path, AUTOSCALE_KEY="sk-autoscale-test"),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # A backlog of over 30 items against one process would have grown the fleet within
        # seconds (the test above); with the keys the limit it stays at one while calls go on.
        seen = _wait_for(url, proc, "12 items done", lambda _, done: done >= 12)
        assert max(seen) == 1, seen
    finally:
        _stop(proc)
    assert proc.returncode == 0, proc.stderr.read()
