"""The supervisor: starts worker processes, restarts, scales, reaps, reports.

It runs in the process that called ``run_fleet`` and never touches items
itself. Its loop ticks a few times a second:

* children's events (JSON lines on one pipe per child) are tallied as they
  arrive, so the final ``FleetReport`` counts what the workers did;
* a child that exits unexpectedly is restarted. One that dies before it
  became ready counts as a start-up failure: ``MAX_STARTUP_FAILURES`` in a
  row (a handler that cannot be imported in the child, storage that cannot be
  opened) and the fleet gives up with ``ExitCode.FAILURE`` and the child's
  reason. Restarts of children that did run are delayed with backoff and
  bounded by ``MAX_RESTARTS_PER_MINUTE``. The dead child's workers are
  released at once (attempt spent: the item may be what killed it) instead
  of waiting for the reaper;
* with ``min_processes < max_processes`` the fleet grows by one process while
  the ready backlog exceeds what the running processes can hold in flight,
  and shrinks by one (a graceful SIGTERM) after ``SCALE_DOWN_IDLE`` seconds
  without a ready backlog;
* lost workers are reaped every ``reap_after / 2`` seconds by whichever
  supervisor holds the ``workhive:reaper`` lock (one reaper fleet-wide;
  without a lock provider it reaps anyway, since reaping is idempotent);
* ``until_empty``: once the pool has nothing pending, delayed or claimed,
  the children are stopped and the run ends with ``ExitCode.DRAINED``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from workhive.errors import LockTimeout, WorkhiveError
from workhive.hive import Hive
from workhive.models import ItemState, PoolStats, WorkerStatus
from workhive.runtime import events as ev
from workhive.runtime.options import ExitCode, FleetOptions, FleetReport
from workhive.runtime.process import EXIT_UNHEALTHY, options_to_json
from workhive.runtime.progress import FleetProgress

__all__ = ["Supervisor"]

log = logging.getLogger("workhive.runtime.supervisor")

TICK = 0.05
STATS_EVERY = 0.2
PROGRESS_EVERY = 1.0
MAX_STARTUP_FAILURES = 3
MAX_RESTARTS_PER_MINUTE = 30
SCALE_DOWN_IDLE = 5.0
SCALE_UP_EVERY = 2.0
REAPER_LOCK = "workhive:reaper"


@attrs.define(eq=False)
class _Child:
    proc: subprocess.Popen[bytes]
    fd: int
    started_at: float
    ready: bool = False
    retiring: bool = False
    eof: bool = False
    fatal: tuple[int, str] | None = None
    worker_ids: set[str] = attrs.field(factory=set)
    running: dict[str, tuple[str, int]] = attrs.field(factory=dict)  # worker id -> (item id, token) it last started
    buffer: bytes = b""


def _child_env() -> dict[str, str]:
    """The child sees the parent's import path, so ``--handler`` resolves the same way in both."""
    env = dict(os.environ)
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    extra = []
    for entry in sys.path:
        path = os.getcwd() if entry == "" else entry
        if any(path.startswith(p) for p in prefixes) and "site-packages" not in path.split(os.sep)[-1:]:
            continue  # the interpreter's own stdlib paths: the child has them already
        if "site-packages" in path:
            continue
        extra.append(path)
    if env.get("PYTHONPATH"):
        extra.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(extra))
    return env


class Supervisor:
    """Runs one fleet; see the module docstring. Use ``run_fleet`` rather than this class."""

    def __init__(
        self,
        options: FleetOptions,
        hive: Hive,
        on_progress: Callable[[FleetProgress], None] | None,
        *,
        log_level: str = "WARNING",
    ) -> None:
        self.options = options
        self.hive = hive
        self.pool = hive.pool(options.pool)
        self.on_progress = on_progress
        self.log_level = log_level
        self.tally = ev.Tally()
        self.children: dict[int, _Child] = {}
        self.reaped = 0
        self.lost_with_process = 0
        lo = options.min_processes if options.min_processes is not None else options.processes
        hi = options.max_processes if options.max_processes is not None else max(options.processes, lo)
        self.min_processes, self.max_processes = lo, hi
        self.target = min(max(options.processes, lo), hi)
        self.stopping = False
        self.result: tuple[int, str] | None = None
        self.signals = 0
        self.startup_failures = 0
        self.restarts: collections.deque[float] = collections.deque()
        self.restart_at = 0.0
        self.started = time.monotonic()
        self.stats: PoolStats | None = None
        self._history: collections.deque[tuple[float, int]] = collections.deque()
        self._last_scale_up = 0.0
        self._idle_since: float | None = None
        self._wakeup = asyncio.Event()
        self._env = _child_env()

    # -- children -----------------------------------------------------------
    def _spawn(self) -> None:
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        cmd = [
            sys.executable,
            "-m",
            "workhive.runtime",
            "--events-fd",
            str(write_fd),
            "--log-level",
            self.log_level,
        ]
        try:
            proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, pass_fds=(write_fd,), env=self._env)
        finally:
            os.close(write_fd)
        assert proc.stdin is not None
        proc.stdin.write((json.dumps(options_to_json(self.options)) + "\n").encode())
        proc.stdin.flush()  # stdin stays open: its EOF tells the child that we died
        child = _Child(proc=proc, fd=read_fd, started_at=time.monotonic())
        self.children[proc.pid] = child
        asyncio.get_running_loop().add_reader(read_fd, self._read_events, child)

    def _read_events(self, child: _Child) -> None:
        while True:
            try:
                data = os.read(child.fd, 65536)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                child.eof = True
                with contextlib.suppress(Exception):
                    asyncio.get_running_loop().remove_reader(child.fd)
                self._wakeup.set()
                return
            lines = (child.buffer + data).split(b"\n")
            child.buffer = lines.pop()
            for line in lines:
                if line:
                    self._on_event(child, json.loads(line))

    def _on_event(self, child: _Child, event: list[Any]) -> None:
        kind = event[0]
        if kind == ev.START:
            child.running[event[1]] = (event[2], int(event[3]))
            return
        if kind == ev.READY:
            child.ready = True
            self.startup_failures = 0
        elif kind == ev.WORKER:
            child.worker_ids.add(event[1])
        elif kind == ev.WORKER_LOST:
            child.worker_ids.discard(event[1])
        elif kind == ev.FATAL:
            child.fatal = (int(event[1]), str(event[2]))
        self.tally.apply(event)

    def _signal_children(self, sig: int, children: list[_Child] | None = None) -> None:
        for child in children if children is not None else list(self.children.values()):
            with contextlib.suppress(ProcessLookupError):
                child.proc.send_signal(sig)

    async def _reap_children(self) -> None:
        for pid, child in list(self.children.items()):
            code = child.proc.poll()
            if code is None:
                continue
            self._read_events(child)  # whatever it wrote before dying
            del self.children[pid]
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(child.fd)
            os.close(child.fd)
            if child.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    child.proc.stdin.close()
            await self._on_child_exit(child, code)

    async def _on_child_exit(self, child: _Child, code: int) -> None:
        clean = code in (0, EXIT_UNHEALTHY)
        if not clean and child.worker_ids:
            # The process is dead, so none of its claims can complete: put them back now rather
            # than wait for the reaper. The item each worker was running spends its attempt (it may
            # be what killed the process, and must be poisoned after max_attempts); claimed items
            # it had not started yet get theirs back.
            for worker_id in child.worker_ids:
                try:
                    running = child.running.get(worker_id)
                    if running is not None:
                        state = await self.hive.storage.fail(
                            self.options.pool,
                            running[0],
                            running[1],
                            f"worker process {child.proc.pid} died (exit status {code}) while running this item",
                            0.0,
                            False,
                        )
                        if state is ItemState.POISONED:
                            self.tally.poisoned += 1
                        elif state is not None:
                            self.tally.failed += 1
                    await self.hive.storage.release_by_worker(None, worker_id, False)
                    await self.hive.storage.set_worker_status(
                        worker_id, WorkerStatus.STOPPED, f"process {child.proc.pid} died (exit status {code})"
                    )
                except WorkhiveError as exc:
                    log.warning("releasing the items of dead worker %s failed (the reaper will): %s", worker_id, exc)
            self.lost_with_process += len(child.worker_ids)
        if self.stopping or child.retiring:
            return
        if child.fatal is not None:
            self._finish(child.fatal[0], f"a worker process could not run: {child.fatal[1]}")
            return
        # A process that exits on its own before it is ready (bad handler import,
        # unreadable config) will do so again: give up after a few. One killed by a
        # signal (an operator, the OOM killer, a chaos test) says nothing about the
        # start-up itself, so it is restarted under the restart-rate limit below.
        if not child.ready and code >= 0:
            self.startup_failures += 1
            log.error("worker process %d exited with status %d before it was ready", child.proc.pid, code)
            self.restart_at = time.monotonic() + 0.5 * self.startup_failures
            if self.startup_failures >= MAX_STARTUP_FAILURES:
                self._finish(
                    ExitCode.FAILURE,
                    f"worker processes exit at start-up ({self.startup_failures} in a row, last exit status {code}); "
                    "see their error output above",
                )
            return
        now = time.monotonic()
        self.restarts.append(now)
        while self.restarts and now - self.restarts[0] > 60:
            self.restarts.popleft()
        if len(self.restarts) > MAX_RESTARTS_PER_MINUTE:
            self._finish(
                ExitCode.FAILURE,
                f"worker processes keep dying ({len(self.restarts)} restarts in the last minute, "
                f"last exit status {code})",
            )
            return
        why = "was unhealthy" if code == EXIT_UNHEALTHY else f"died (exit status {code})"
        log.warning("worker process %d %s; starting a replacement", child.proc.pid, why)
        self.restart_at = max(self.restart_at, now + min(5.0, 0.05 * 2 ** len(self.restarts)))

    def _finish(self, code: int, reason: str) -> None:
        if self.result is None:
            self.result = (code, reason)
        self._begin_stop()

    def _begin_stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            self._stop_deadline = time.monotonic() + self.options.grace + 10.0
            self._signal_children(signal.SIGTERM)

    # -- signals ------------------------------------------------------------
    def _on_signal(self, signum: int) -> None:
        self.signals += 1
        name = signal.Signals(signum).name
        if self.signals == 1:
            log.warning(
                "%s: stopping; in-flight items get %.0fs to finish (again to exit at once)", name, self.options.grace
            )
            self._finish(ExitCode.STOPPED, f"stopped by {name}")
        else:
            self.result = (ExitCode.INTERRUPTED, f"interrupted by a second {name}; claims left to expire")
            self._signal_children(signal.SIGTERM)  # their second signal: exit at once
            self._wakeup.set()

    # -- periodic work ------------------------------------------------------
    async def _reap_workers(self) -> None:
        try:
            async with self.hive.lock(REAPER_LOCK, timeout=0, worker_id=f"supervisor-{os.getpid()}"):
                reaped = await self.hive.workers.reap()
        except LockTimeout:
            return  # another supervisor is reaping
        except (WorkhiveError, OSError) as exc:
            log.debug("no reaper lock (%s); reaping anyway, reaping is idempotent", exc)
            try:
                reaped = await self.hive.workers.reap()
            except WorkhiveError as exc2:
                log.warning("reaping lost workers failed: %s", exc2)
                return
        for worker in reaped:
            log.warning(
                "reaped lost worker %s: %d item(s) released, %d poisoned",
                worker.worker_id,
                worker.released,
                worker.poisoned,
            )
        self.reaped += len(reaped)

    def _scale(self, stats: PoolStats) -> None:
        if self.min_processes == self.max_processes:
            return
        now = time.monotonic()
        active = [c for c in self.children.values() if not c.retiring]
        in_flight = len(active) * self.options.concurrency * self.options.batch
        if stats.pending > 2 * max(1, in_flight) and self.target < self.max_processes:
            if now - self._last_scale_up >= SCALE_UP_EVERY:
                self.target += 1
                self._last_scale_up = now
                log.info("backlog of %d: scaling up to %d processes", stats.pending, self.target)
            self._idle_since = None
        elif stats.pending == 0:
            if self._idle_since is None:
                self._idle_since = now
            elif now - self._idle_since >= SCALE_DOWN_IDLE and self.target > self.min_processes:
                self.target -= 1
                self._idle_since = now
                log.info("no backlog for %.0fs: scaling down to %d processes", SCALE_DOWN_IDLE, self.target)
        else:
            self._idle_since = None
        active = [c for c in self.children.values() if not c.retiring]
        if len(active) > self.target:
            victim = max(active, key=lambda c: c.started_at)
            victim.retiring = True
            self._signal_children(signal.SIGTERM, [victim])

    def _progress(self, final: bool = False) -> None:
        if self.on_progress is None:
            return
        now = time.monotonic()
        finished = self.tally.done + self.tally.poisoned
        self._history.append((now, finished))
        while len(self._history) > 2 and now - self._history[0][0] > 10.0:
            self._history.popleft()
        t0, f0 = self._history[0]
        rate = (finished - f0) / (now - t0) if now - t0 > 0.5 else 0.0
        stats = self.stats
        pending, delayed, claimed = (stats.pending, stats.delayed, stats.claimed) if stats else (0, 0, 0)
        remaining = pending + delayed + claimed
        self.on_progress(
            FleetProgress(
                pool=self.options.pool,
                elapsed=now - self.started,
                done=self.tally.done,
                failed=self.tally.failed,
                poisoned=self.tally.poisoned,
                released=self.tally.released,
                rate=rate,
                eta=remaining / rate if rate > 0 else None,
                pending=pending,
                delayed=delayed,
                claimed=claimed,
                processes=len(self.children),
                workers=sum(len(c.worker_ids) for c in self.children.values()),
                rate_limited=dict(self.tally.rate_limited),
                disabled=dict(self.tally.disabled),
                final=final,
            )
        )

    # -- main loop ----------------------------------------------------------
    async def run(self) -> FleetReport:
        loop = asyncio.get_running_loop()
        handled: list[signal.Signals] = []
        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                loop.add_signal_handler(sig, self._on_signal, sig)
                handled.append(sig)
        try:
            await self._loop()
        finally:
            for sig in handled:
                loop.remove_signal_handler(sig)
            if self.children:  # only after a second signal or a stuck drain
                self._signal_children(signal.SIGKILL)
                for child in list(self.children.values()):
                    with contextlib.suppress(Exception):
                        child.proc.wait(timeout=2.0)
                await self._reap_children()
        return self._report()

    async def _loop(self) -> None:
        for _ in range(self.target):
            self._spawn()
        next_stats = next_reap = next_progress = 0.0
        reap_every = max(0.5, self.options.reap_after / 2)
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), TICK)
            self._wakeup.clear()
            await self._reap_children()
            now = time.monotonic()
            if self.result is not None and self.result[0] == ExitCode.INTERRUPTED:
                return
            if self.stopping:
                if not self.children:
                    return
                if now > self._stop_deadline:
                    log.error("worker processes did not stop within grace + 10s; killing them")
                    return
                continue
            if now >= next_stats:
                next_stats = now + STATS_EVERY
                try:
                    self.stats = await self.pool.stats()
                except WorkhiveError as exc:
                    log.warning("reading pool statistics failed: %s", exc)
                else:
                    if self.options.until_empty and self.stats.pending + self.stats.delayed + self.stats.claimed == 0:
                        self._finish(ExitCode.DRAINED, "the pool drained")
                        continue
                    self._scale(self.stats)
            if now >= next_reap:
                next_reap = now + reap_every
                await self._reap_workers()
            if now >= next_progress:
                next_progress = now + PROGRESS_EVERY
                self._progress()
            active = sum(1 for c in self.children.values() if not c.retiring)
            if active < self.target and now >= self.restart_at and self.result is None:
                self._spawn()

    def _report(self) -> FleetReport:
        code, reason = (
            self.result if self.result is not None else (ExitCode.FAILURE, "the supervisor stopped unexpectedly")
        )
        with contextlib.suppress(Exception):
            self._progress(final=True)
        return FleetReport(
            pool=self.options.pool,
            done=self.tally.done,
            failed=self.tally.failed,
            poisoned=self.tally.poisoned,
            released=self.tally.released,
            rate_limited=dict(self.tally.rate_limited),
            disabled_credentials=dict(self.tally.disabled),
            workers_started=self.tally.workers_started,
            workers_lost=self.tally.workers_lost + self.reaped + self.lost_with_process,
            elapsed=time.monotonic() - self.started,
            exit_code=code,
            reason=reason,
        )
