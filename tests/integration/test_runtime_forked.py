"""How worker processes start: forked from the supervisor where that is safe, else a fresh interpreter.

``workhive.runtime.forked``: a forked worker keeps the supervisor's imports and
nothing else of it (its descriptors, signal handlers, stdio objects), and a
supervisor process running a second thread spawns instead.
"""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import workhive
from workhive.errors import ConfigError
from workhive.runtime import FleetOptions
from workhive.runtime.fleet import check_options
from workhive.runtime.forked import ForkedProcess, fork_refusal

from .conftest import fleet_env, report_of

pytest.importorskip("workhive_sqlite")

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="needs /proc (Linux) to fork workers")

TIMEOUT = 60
SPAWNED_ARGV0 = os.path.join("workhive", "runtime", "__main__.py")

SCRIPT = """
import json, sys, threading, attrs
from workhive.runtime import FleetOptions, run_fleet
if __name__ == "__main__":
    if sys.argv[2] == "thread":  # a thread of the application's own, running as the fleet starts
        threading.Thread(target=threading.Event().wait, daemon=True).start()
    report = run_fleet(FleetOptions(**json.loads(sys.argv[1])))
    print("REPORT " + json.dumps(attrs.asdict(report)), flush=True)
    sys.exit(report.exit_code)
"""


def _run(tmp_path: Path, start_method: str, *, thread: bool = False, items: int = 40) -> list[dict]:
    db = tmp_path / "hive.db"
    url = f"sqlite:///{db}"

    async def push() -> list[str]:
        async with workhive.open(url) as hive:
            return await hive.pool("jobs").push_many([{"n": n} for n in range(items)])

    ids = asyncio.run(push())
    script = tmp_path / "fleet.py"
    script.write_text(SCRIPT)
    options = {
        "pool": "jobs", "handler": "handlers:where", "storage": url, "locks": f"fcntl:///{tmp_path / 'locks'}",
        "processes": 2, "until_empty": True, "progress": "none", "start_method": start_method,
    }  # fmt: skip
    proc = subprocess.run(
        [sys.executable, str(script), json.dumps(options), "thread" if thread else "-"],
        env=fleet_env(WORKHIVE_TEST_MARK="from the environment"), cwd=tmp_path, capture_output=True, text=True,
        timeout=TIMEOUT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = report_of(proc.stdout)
    assert report["done"] == items, report

    async def results() -> list[dict]:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            got = [await pool.get(i) for i in ids]
            assert all(item is not None and item.state.value == "done" for item in got), got
            return [item.result for item in got if item is not None]

    return asyncio.run(results())


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_both_start_methods_drain_the_pool_in_processes_of_their_own(tmp_path: Path, start_method: str) -> None:
    results = _run(tmp_path, start_method)
    assert {r["argv0"].endswith(SPAWNED_ARGV0) for r in results} == {start_method == "spawn"}, results
    for r in results:
        assert r["own_session"], r  # a signal to the supervisor's process group does not reach them
        assert r["path_env"] == "from the environment", r
        # Its events pipe and nothing else: no pipe of the supervisor's or of a sibling's (a sibling
        # holding another child's stdin would hide the supervisor's death from it).
        assert r["pipes_beyond_stdio"] == 1, r


@pytest.mark.parametrize("thread", [False, True], ids=["sqlite's thread", "and the application's"])
def test_auto_spawns_while_another_thread_runs_in_the_supervisors_process(tmp_path: Path, thread: bool) -> None:
    # On SQLite the supervisor's own hive runs its connection in a thread of its own: a fork
    # while that thread is inside SQLite would leave the library's locks held in the child.
    results = _run(tmp_path, "auto", thread=thread, items=10)
    assert all(r["argv0"].endswith(SPAWNED_ARGV0) for r in results), results


def test_fork_refusal_names_a_second_thread() -> None:
    release = threading.Event()
    thread = threading.Thread(target=release.wait)
    thread.start()
    try:
        why = fork_refusal()
        assert why is not None and "threads run in the supervisor's process" in why, why
    finally:
        release.set()
        thread.join()


def test_a_start_method_that_does_not_exist_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="start_method must be one of auto, fork, spawn; got 'thread'"):
        check_options(FleetOptions(pool="jobs", handler="handlers:noop", start_method="thread"))  # type: ignore[arg-type]


def test_the_handle_on_a_forked_process_reports_as_popen_does() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    handle = ForkedProcess(child.pid, stdin=io.BytesIO(), stderr=io.BytesIO())
    try:
        assert handle.poll() is None
        with pytest.raises(subprocess.TimeoutExpired):
            handle.wait(timeout=0.05)
        handle.kill()
        assert handle.wait(timeout=TIMEOUT) == -signal.SIGKILL
        assert handle.returncode == -signal.SIGKILL
        handle.send_signal(signal.SIGTERM)  # reaped: never signalled again (its PID may be reused)
    finally:
        if handle.returncode is None:
            child.kill()
            child.wait()
        child.returncode = handle.returncode  # reaped through the handle: Popen must not wait for it again


@pytest.mark.skipif(fork_refusal() is not None, reason="this test process cannot fork safely")
def test_a_signal_before_the_child_reset_its_handlers_waits_for_them_and_never_reaches_the_parent(monkeypatch) -> None:
    from workhive.runtime import forked

    become = forked._become_worker

    def signalled_at_once(*args: object) -> None:
        os.kill(os.getpid(), signal.SIGTERM)  # as the supervisor stopping a child it just started
        become(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(forked, "_become_worker", signalled_at_once)
    wakeup_r, wakeup_w = socket.socketpair()
    events_r, events_w = os.pipe()
    for s in (wakeup_r, wakeup_w):
        s.setblocking(False)
    # What an asyncio loop's add_signal_handler sets up in the supervisor: a handler and a wakeup descriptor.
    old_handler = signal.signal(signal.SIGTERM, lambda *_: None)
    old_wakeup = signal.set_wakeup_fd(wakeup_w.fileno())
    try:
        child = forked.fork_worker(["--events-fd", str(events_w)], dict(os.environ), (events_w,))
        # Held until the child's handlers were the defaults: the signal ended it before the worker began.
        assert child.wait(timeout=TIMEOUT) == -signal.SIGTERM
        with pytest.raises(BlockingIOError):
            wakeup_r.recv(16)  # nothing written to the supervisor's wakeup descriptor
    finally:
        signal.set_wakeup_fd(old_wakeup)
        signal.signal(signal.SIGTERM, old_handler)
        for s in (wakeup_r, wakeup_w):
            s.close()
        os.close(events_r)
        os.close(events_w)
