"""The faults a scenario's schedule is made of, and the seeded schedule itself.

Each fault is a function of the ``Drill``: it acts on the current fleet run,
the private server or the proxy in front of it, and returns once the world is
whole again (a stopped process continued, a killed server restarted, a dead
fleet replaced by a new run), having checked what the fault promises on the
way (a fleet signalled as a group stops cleanly, a fleet whose storage is gone
gives up in bounded time). Durations come from the drill's seeded ``rng``: the
seed is printed with every scenario, and ``WORKHIVE_FAULTS_SEED`` replays it.

>>> schedule(["worker_kill", "proxy_cut"], random.Random(1), repeat=1)  # doctest: +SKIP
[(0.16, 'proxy_cut'), (0.43, 'worker_kill')]
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from .drill import HERE, POLL, POOL, Abandon, Drill
from .servers import PrivatePostgres, PrivateRedis

__all__ = ["FAULTS", "schedule"]


def schedule(kinds: list[str], rng: random.Random, repeat: int, first: tuple[str, ...] = ()) -> list[tuple[float, str]]:
    """``first``, then each of ``kinds`` ``repeat`` times in a random order, each when a random
    share (10-60%) of the wave of items pushed before it has finished."""
    names = [k for k in kinds for _ in range(repeat)]
    rng.shuffle(names)
    return [(round(rng.uniform(0.1, 0.6), 3), name) for name in (*first, *names)]


def _a_worker(drill: Drill) -> int | None:
    """A worker process of the current run (waiting a little for one to be started)."""
    run = drill.current
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and run.running():
        workers = run.workers()
        if workers:
            return drill.rng.choice(workers)
        time.sleep(POLL)
    return None


def _send(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


# -- processes ------------------------------------------------------------------------------
def worker_kill(drill: Drill) -> None:
    """SIGKILL one worker process: its claims must come back, no completion of it may win later."""
    pid = _a_worker(drill)
    if pid is not None:
        drill.current.faulted = True
        _send(pid, signal.SIGKILL)


def worker_stop(drill: Drill) -> None:
    """SIGSTOP one worker process past its lease (its claims go elsewhere), then SIGCONT it."""
    pid = _a_worker(drill)
    if pid is None:
        return
    drill.current.faulted = True
    _send(pid, signal.SIGSTOP)
    try:
        time.sleep(drill.rng.uniform(0.6, 1.8) * drill.settings.lease)
    finally:
        _send(pid, signal.SIGCONT)


def supervisor_stop(drill: Drill) -> None:
    """SIGSTOP the supervisor (no reaping, no restarts, events pile up), then SIGCONT it."""
    run = drill.current
    _a_worker(drill)
    run.faulted = True  # its workers may be reaped meanwhile
    run.signal(signal.SIGSTOP)
    try:
        time.sleep(drill.rng.uniform(0.5, 1.2) * drill.settings.reap_after)
    finally:
        run.signal(signal.SIGCONT)


def supervisor_kill(drill: Drill, between: Callable[[Drill], None] | None = None) -> None:
    """SIGKILL the supervisor: its workers drain and exit on their own; a new fleet finishes the pool.

    ``between`` runs once the old fleet is gone and before the new one starts.
    """
    run = drill.current
    _a_worker(drill)  # so that its workers are known, and seen to drain
    run.signal(signal.SIGKILL)
    run.wait(timeout=60)
    run.ended_by = "supervisor SIGKILL"
    assert drill.watcher is not None
    with drill.watcher.paused():  # no fleet runs until the next one starts: nothing can settle meanwhile
        drill.wait_orphans(run)
        drill.outputs += [(f"{run.name} stderr", run.stderr()), (f"{run.name} stdout", run.stdout())]
        if between is not None:
            between(drill)
        drill.start_fleet()


def group_term(drill: Drill) -> None:
    """SIGTERM to the fleet's whole process group (``timeout 60 workhive work``, a Ctrl-C): one signal.

    The fleet must stop as after one SIGTERM: in-flight items get their grace, the rest
    is put back, exit status 0 with a report that agrees with the store.
    """
    run = drill.current
    _a_worker(drill)  # the supervisor handles signals once it starts workers; before, SIGTERM just ends it
    run.signal_group(signal.SIGTERM)
    run.ended_by = "group SIGTERM"
    assert drill.watcher is not None
    bound = drill.settings.grace + 60.0
    try:
        drill.wait_until(lambda: not run.running(), f"{run.name} to stop after a SIGTERM to its group", cap=bound)
    except Abandon as exc:
        drill.problems.append(f"[group signal] {run.name} did not stop after SIGTERM to its group: {exc}")
        run.kill_all()
    with drill.watcher.paused():
        drill.wait_orphans(run)
        drill.settle_run(run, 0, "SIGTERM sent to its whole process group")
        report = run.report()
        if report is not None and not run.faulted and report.get("workers_lost"):
            # Nothing else touched this run's workers: one that did not stop cleanly took the
            # group's signal and the supervisor's as two (exit at once, no grace for its items).
            drill.problems.append(
                f"[group signal] {run.name}: {report['workers_lost']} worker(s) died instead of stopping after "
                f"one SIGTERM to the group (report {report}); stderr: {run.tail()}"
            )
        drill.start_fleet()


# -- the server -----------------------------------------------------------------------------
def _server(drill: Drill) -> PrivatePostgres | PrivateRedis:
    server = drill.target.server
    assert server is not None, "server faults need a server engine"
    return server


def server_restart(drill: Drill) -> None:
    """SIGKILL the server mid-drain and start it again (PostgreSQL recovers its WAL, Redis its AOF)."""
    server = _server(drill)
    server.kill()
    time.sleep(drill.rng.uniform(0.2, 2.0))
    server.start()


def outage(drill: Drill) -> None:
    """SIGKILL the server and keep it down: the fleet must give up (exit 1, storage named) in bounded time.

    No handler of the scenario fails, so whatever the fleet reports as failed or
    poisoned was the storage's fault blamed on an item. Then the server comes back
    and a new run finishes the pool.
    """
    server = _server(drill)
    run = drill.current
    run.workers()
    assert drill.watcher is not None
    with drill.watcher.paused():  # the server is down on purpose: claims cannot settle until it is back
        server.kill()
        bound = drill.give_up_bound
        deadline = time.monotonic() + bound
        while run.running() and time.monotonic() < deadline:
            time.sleep(POLL)
        run.ended_by = "outage"
        if run.running():
            drill.problems.append(
                f"[give up] {run.name} still ran {bound:.0f}s after its storage died for good (retry window "
                f"{drill.target.retry_for:g}s, grace {drill.settings.grace:g}s); stderr: {run.tail()}"
            )
            run.kill_all()
        drill.wait_orphans(run)
        server.start()
        drill.outputs += [(f"{run.name} stdout", run.stdout()), (f"{run.name} stderr", run.stderr())]
        if run.returncode != 1:
            drill.problems.append(
                f"[give up] {run.name} exited {run.returncode} after its storage died, expected 1; stderr: {run.tail()}"
            )
        report = run.report()
        if report is not None:
            if "storage" not in str(report.get("reason", "")).lower():
                drill.problems.append(f"[give up] {run.name}'s reason does not name the storage: {report['reason']!r}")
            if report.get("failed") or report.get("poisoned"):
                drill.problems.append(
                    f"[blamed on items] {run.name} counted {report.get('failed')} failed and "
                    f"{report.get('poisoned')} poisoned item(s) when its storage died; no handler failed"
                )
        drill.start_fleet()


# -- the network, through the proxy ----------------------------------------------------------
def _proxy(drill: Drill):  # type: ignore[no-untyped-def]
    proxy = drill.target.proxy
    assert proxy is not None, "network faults need a server engine"
    return proxy


def proxy_cut(drill: Drill) -> None:
    """Reset every connection of the fleet at once (acks in flight have an unknown outcome)."""
    _proxy(drill).cut()


def proxy_stall(drill: Drill) -> None:
    """Forward nothing for a while (past a lease at times), then deliver it all late."""
    proxy = _proxy(drill)
    proxy.stall()
    try:
        time.sleep(drill.rng.uniform(0.3, 1.5) * drill.settings.lease)
    finally:
        proxy.heal()


def proxy_delay(drill: Drill) -> None:
    """Every chunk late by 20-300 ms for a few seconds."""
    proxy = _proxy(drill)
    proxy.delay(drill.rng.uniform(0.02, 0.3))
    try:
        time.sleep(drill.rng.uniform(1.0, 3.0))
    finally:
        proxy.heal()


def proxy_half_open(drill: Drill) -> None:
    """The server side of every connection vanishes without a word; the fleet must notice by itself."""
    proxy = _proxy(drill)
    proxy.half_open()
    try:
        time.sleep(drill.rng.uniform(1.0, 3.0))
    finally:
        proxy.heal()


# -- SQLite: the file, and the clock ---------------------------------------------------------
def short_lived(drill: Drill) -> None:
    """Short-lived processes on the fleet's file: a few ``workhive push`` and ``status`` runs at once.

    The items they push join the scenario (each opens a second handle in its worker:
    ``second_handle``), so a push that the store loses is a lost item.
    """
    procs: list[tuple[subprocess.Popen[str], str | None, str]] = []
    for k in range(3):
        lines = "".join(json.dumps({"n": 100_000 + 10 * len(drill.pushed) + k * 3 + j, "fault": "second_handle"}) + "\n"
                        for j in range(3))  # fmt: skip
        push = subprocess.Popen(
            [sys.executable, "-m", "workhive", "--storage", drill.target.fleet_url, "push", POOL, "-", "--json"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            cwd=drill.target.workdir, env=drill.env(),
        )  # fmt: skip
        status = subprocess.Popen(
            [sys.executable, "-m", "workhive", "--storage", drill.target.fleet_url, "status", "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=drill.target.workdir, env=drill.env(),
        )  # fmt: skip
        procs.append((push, lines, "push"))
        procs.append((status, None, "status"))
    for proc, given, what in procs:
        try:
            out, err = proc.communicate(input=given, timeout=300)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        drill.outputs += [(f"short-lived {what} stdout", out), (f"short-lived {what} stderr", err)]
        if proc.returncode != 0:
            drill.problems.append(f"[short-lived] `workhive {what}` exited {proc.returncode}: {err[-800:]}")
            continue
        if what == "push" and given is not None:
            ids = json.loads(out)["ids"]
            data = [json.loads(line) for line in given.splitlines()]
            drill.pushed.update(zip(ids, data))


def gap_short_lived(drill: Drill) -> None:
    """SIGKILL the supervisor, and while no fleet process has the file open, run short-lived ones.

    Each of them may then be the last process to close the file as far as the locks show.
    """
    supervisor_kill(drill, between=short_lived)


def two_handles(drill: Drill) -> None:
    """Start a process that keeps one handle on the file open and opens and closes a second one,
    pushing an item each round, until the drill stops it (see two_handles.py)."""
    helper = subprocess.Popen(
        [sys.executable, str(HERE / "two_handles.py"), drill.target.fleet_url, POOL,
         str(drill.target.workdir / "helpers-stop")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=drill.target.workdir, env=drill.env(),
    )  # fmt: skip
    drill.helpers.append(helper)


def clock_step(drill: Drill) -> None:
    """Step every fleet process's wall clock by minutes to an hour, forward or back (see clockshim/)."""
    path = drill.target.workdir / "clock-shift"
    shift = float(path.read_text() or 0) if path.exists() else 0.0
    shift += drill.rng.choice((-1, 1)) * drill.rng.uniform(60, 3600)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(f"{shift}")
    tmp.replace(path)  # atomic: a process never reads half a number


FAULTS: dict[str, Callable[[Drill], None]] = {
    f.__name__: f
    for f in (
        worker_kill, worker_stop, supervisor_stop, supervisor_kill, group_term,
        server_restart, outage, proxy_cut, proxy_stall, proxy_delay, proxy_half_open,
        short_lived, gap_short_lived, two_handles, clock_step,
    )
}  # fmt: skip
