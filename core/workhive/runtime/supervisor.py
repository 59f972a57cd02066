"""The supervisor: starts worker processes, restarts, scales, reaps, reports.

``Supervisor`` runs in the process that called ``run_fleet`` and never
touches items itself: it tallies its children's events into the
``FleetReport``, replaces children that die (charging the item that killed
one: ``runtime.aftermath``), turns one request to stop into one SIGTERM per
child (``runtime.stop_requests``), scales between ``min_processes`` and
``max_processes``, reaps lost workers and ends an ``until_empty`` run once the
pool drains. Why it works the way it does: ``docs/runtime.md``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import importlib
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

from workhive.autoscale import ScaleInputs, admissible_items, budget_processes, budget_rate, decide
from workhive.errors import LockTimeout, StorageCorrupt, WorkhiveError
from workhive.hive import Hive
from workhive.liveness import reap_gone
from workhive.models import PoolStats
from workhive.redaction import scrub, scrub_data
from workhive.runtime import events as ev
from workhive.runtime.aftermath import Aftermath, how_it_ended
from workhive.runtime.board import LaneBoard
from workhive.runtime.forked import CANNOT_FORK, ForkedProcess, fork_refusal, fork_worker
from workhive.runtime.options import ExitCode, FleetOptions, FleetReport
from workhive.runtime.patience import WaitBudget, retry_window
from workhive.runtime.progress import FleetProgress
from workhive.runtime.relay import OutputRelay
from workhive.runtime.shared import (
    EXIT_UNHEALTHY,
    PATH_AFTER_ENV,
    PLUGINS_FOUND_ENV,
    build_credentials,
    found_to_env,
    metrics_enabled,
    options_to_json,
)
from workhive.runtime.stop_requests import ECHO_WINDOW, StopRequests
from workhive.schedules import StoresSchedules

__all__ = ["Supervisor"]

log = logging.getLogger("workhive.runtime.supervisor")

TICK = 0.05
#: the pool's counts are read at most this often; a read that takes long (``stats`` counts a
#: whole pool, done items included) is repeated only STATS_COST_FACTOR times its duration
#: later, so the supervisor's reads stay a small share of the store's work however big the
#: pool grows, except when the pool is expected to drain sooner (see ``stats_gap``)
STATS_EVERY = 0.2
STATS_COST_FACTOR = 20.0
#: with --until-empty, a worker whose claim came back empty (a RAN_DRY event) has the counts
#: read at once, the pool being likely drained; such early reads come at most every TICK
#: and never more than one per RAN_DRY_COST_FACTOR times the last read's duration, except
#: when items finished here since the last read began: that read may have counted them as
#: still in flight, so the next comes as soon as the store has been left alone as long as
#: the last read took (half its time at most goes to these reads)
RAN_DRY_COST_FACTOR = 5.0
PROGRESS_EVERY = 1.0
MAX_STARTUP_FAILURES = 3
MAX_RESTARTS_PER_MINUTE = 30
SPAWN_PER_TICK = 4
EVENT_READ_PAUSE = 0.005  # seconds a child's event pipe goes unwatched after a read (see _on_readable)
GONE_EVERY = 1.0  # how often local workers' PIDs are checked (a dead one is reaped at once)
LAST_ERRORS = 3  # failing items whose last error the progress display keeps
#: statistics reads failing this many times in a row (with doubling pauses up to
#: STORAGE_RETRY_MAX seconds between them) end the run: a fault that lasts is not waited out forever
MAX_STORAGE_FAILURES = 8
STORAGE_RETRY_MAX = 5.0
REAPER_LOCK = "workhive:reaper"
#: how often the supervisor fires the hive's due schedules (workhive.schedules); every
#: supervisor does, and the storage pushes each tick once however many do
SCHEDULES_EVERY = 1.0
#: each ended call weighs the observed call time down by this factor: recent calls count most
CALL_DECAY = 0.95


_START = b'["start","'


def _decode(line: bytes) -> list[Any]:
    """One event line as ``json.loads`` reads it; START, one per item, read without it when it can be.

    A START line as the children's sink writes it (``events.PipeSink``) with no escape in it:
    every ``"`` delimits a string, so splitting on them reads it, in a third of the time.
    """
    if line.startswith(_START) and b"\\" not in line:
        parts = line[len(_START) :].split(b'"')
        if len(parts) == 4 and parts[1] == b"," and parts[3].startswith(b",") and parts[3].endswith(b"]"):
            numbers = parts[3][1:-1].split(b",")
            if len(numbers) == 2 and numbers[0].isdigit() and numbers[1].isdigit():
                return [ev.START, parts[0].decode(), parts[2].decode(), int(numbers[0]), int(numbers[1])]
    return json.loads(line)  # type: ignore[no-any-return]


@attrs.define(eq=False)
class _Child:
    proc: subprocess.Popen[bytes] | ForkedProcess
    fd: int
    started_at: float
    ready: bool = False
    retiring: bool = False
    eof: bool = False
    fatal: tuple[int, str] | None = None
    config_failed: str | None = None  # why its configuration could not be written, if it could not
    worker_ids: set[str] = attrs.field(factory=set)
    running: dict[str, tuple[str, int]] = attrs.field(factory=dict)  # lane -> (item id, token) it last started
    alone: tuple[str, int] | None = None  # the claim last started alone (a crash suspect), until another starts
    # claims started here whose outcome (done, failed, poisoned) has not been reported yet: item id -> token
    unreported: dict[str, int] = attrs.field(factory=dict)
    buffer: bytes = b""
    exited: tuple[int, str, int] | None = None  # its EXIT event: code, reason, workers it could not deregister
    stopped_by_us: bool = False  # told to exit at once, or killed, by the supervisor: no item is to blame
    relay: OutputRelay | None = None  # its stderr, passed on scrubbed
    board: LaneBoard | None = None  # its lanes' progress through batches announced in BATCH events
    # lane -> (board number, the items of the batch it runs in order), from BATCH events
    batches: dict[str, tuple[int, list[tuple[str, int]]]] = attrs.field(factory=dict)

    def read_board(self) -> None:
        """Once the process is dead and its events read: what its board says each lane was running, into ``running``.

        A lane's slot names the item of its latest announced batch it ran last, as a START
        would have. A slot naming an earlier batch means the lane had not begun this one:
        its last batch had ended, so nothing ran there. The batch's items after the one
        it ran never started: they leave ``unreported`` (no outcome of theirs to count).
        """
        if self.board is None:
            return
        for lane, (number, items) in self.batches.items():
            batch, index = self.board.read(int(lane.rpartition("#")[2]))
            begun = index + 1 if batch == number else 0
            if begun and index < len(items):
                self.running[lane] = items[index]
            for item_id, _ in items[begun:]:
                self.unreported.pop(item_id, None)
        self.batches.clear()
        self.board.close()


def _child_env() -> dict[str, str]:
    """The child sees the parent's import path, in the parent's order, so ``--handler`` resolves the same way.

    Entries before site-packages go on PYTHONPATH. Entries the parent appended after
    it must stay after it: on PYTHONPATH they would shadow installed packages (a
    ``redis.py`` in a script's directory hiding the ``redis`` package), so the child
    appends them itself (``PATH_AFTER_ENV``).
    """
    env = dict(os.environ)
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    before: list[str] = []
    after: list[str] = []
    past_site = False
    for entry in sys.path:
        path = os.getcwd() if entry == "" else entry
        if "site-packages" in path:
            past_site = True
            continue
        if any(path.startswith(p) for p in prefixes):
            continue  # the interpreter's own stdlib paths: the child has them already
        (after if past_site else before).append(path)
    if env.get("PYTHONPATH"):
        before.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(before))
    env[PATH_AFTER_ENV] = os.pathsep.join(dict.fromkeys(p for p in after if p not in before))
    return env


def remaining(stats: PoolStats) -> int:
    """Items not finished yet: ready, delayed or claimed."""
    return stats.pending + stats.delayed + stats.claimed


def stats_gap(took: float, left: int, left_before: int | None, since: float | None) -> float:
    """Seconds until the supervisor reads the pool's counts again.

    ``took``: how long this read took; ``left``: items not finished now; ``left_before``
    and ``since``: the same at the previous read and the seconds between the two.
    A slow read is repeated STATS_COST_FACTOR times its duration later; but when the
    pool, finishing items at the rate seen between the reads, would drain before
    that, the next read comes when it should have drained (at least STATS_EVERY
    later), so ``--until-empty`` ends without waiting out a long gap.

    >>> stats_gap(0.001, 500, None, None)
    0.2
    >>> stats_gap(0.1, 100_000, 110_000, 2.0)  # 5,000 items/s: 20 s to go, reads 2 s apart
    2.0
    >>> stats_gap(0.1, 4_000, 14_000, 2.0)  # 0.8 s to go
    0.8
    """
    gap = max(STATS_EVERY, STATS_COST_FACTOR * took)
    if left_before is not None and since and left_before > left:
        drains_in = left / ((left_before - left) / since)
        gap = min(gap, max(STATS_EVERY, drains_in))
    return gap


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
        # workhive.metrics when serving --metrics-port (fleet.py set it up), else None
        self.metrics: Any = importlib.import_module("workhive.metrics") if metrics_enabled(options) else None
        self.pool = hive.pool(options.pool)
        self.on_progress = on_progress
        self.log_level = log_level
        self.tally = ev.Tally()
        self.children: dict[int, _Child] = {}
        self.reaped = 0
        self.replaced = 0  # worker processes that died (or could not be started) and were replaced
        lo = options.min_processes if options.min_processes is not None else options.processes
        hi = options.max_processes if options.max_processes is not None else max(options.processes, lo)
        self.min_processes, self.max_processes = lo, hi
        self.target = min(max(options.processes, lo), hi)
        self.stopping = False
        self.result: tuple[int, str] | None = None
        self.requests = StopRequests()
        self.startup_failures = 0
        self.restarts: collections.deque[float] = collections.deque()
        self.restart_at = 0.0
        self.started = time.monotonic()
        self.stats: PoolStats | None = None
        self._stats_read_at: float | None = None
        self._ran_dry = False  # a RAN_DRY event came since the last read of the counts
        self._early_read_at = 0.0  # when a RAN_DRY may next bring a read forward
        self._stale_read_at = 0.0  # when it may, if items finished here since the last read began
        self._settled_at_read = 0  # items this fleet had settled when the last read began
        self._drained_at_read = False  # the run ended because the last read of the counts found nothing left
        self.storage_failures = 0
        # Storage is known to fail (reads failed, a child stopped on a storage fault, a call timed
        # out): a signal while the fleet stops then means "stop waiting for it".
        self.storage_failing = False
        self._failing_since = 0.0  # when the first read of the current run of failed ones began
        self.window = retry_window(hive.storage)  # what one job may wait on storage in all
        self._stop_budget: WaitBudget | None = None  # shared by every storage call made while stopping
        self._child_budget: WaitBudget | None = None  # the one settling a dead child right now
        self.aftermath = Aftermath(hive, options, self.tally)
        self.gave_up_on_storage: str | None = None  # the signal on which the stop stopped waiting for storage
        self.last_errors: collections.OrderedDict[str, str] = collections.OrderedDict()
        self._baseline: PoolStats | None = None  # the pool when the run began: progress counts from it
        self._history: collections.deque[tuple[float, int]] = collections.deque()
        self._last_scale_up = 0.0
        self._idle_since: float | None = None
        #: calls per second the keys' budgets allow together (workhive.autoscale.budget_rate), None: unbounded
        self.budget_rate = self._budget_rate()
        #: seconds a call takes (a moving average over ended calls), None until one ended
        self.call_seconds: float | None = None
        self._started_at: dict[str, float] = {}  # item id -> when its call started (for call_seconds)
        self._busy = self._waited = self._calls = self._waits_since = 0.0  # see _timed
        self._wakeup = asyncio.Event()
        self._env = _child_env()
        self._env[PLUGINS_FOUND_ENV] = found_to_env(hive.manager.found)
        self._fork_refused: str | None = None  # why worker processes were last not forked (logged once per reason)

    def _budget_rate(self) -> float | None:
        """What the fleet's keys allow together, from ``--credentials`` (their rpm/tpm), or None."""
        if not self.options.credentials:
            return None
        try:
            credentials = build_credentials(self.options, self.hive)
        except WorkhiveError as exc:  # the workers report a bad credential spec themselves
            log.debug("no budget bound for scaling: %s", exc)
            return None
        if credentials is None:
            return None
        return budget_rate((c.budget for c in credentials.credentials()), self.options.token_estimate)

    # -- children -----------------------------------------------------------
    def _start(self, write_fd: int, board: LaneBoard | None) -> subprocess.Popen[bytes] | ForkedProcess:
        """A worker process with its events pipe ``write_fd`` and its lane ``board``: forked when safe, else spawned."""
        args = ["--events-fd", str(write_fd), "--log-level", self.log_level]
        fds: tuple[int, ...] = (write_fd,)
        if board is not None:
            args += ["--board-fd", str(board.fd)]
            fds += (board.fd,)
        if self._may_fork():
            return fork_worker(args, self._env, fds)
        return self._popen([sys.executable, "-m", "workhive.runtime", *args], fds)

    def _may_fork(self) -> bool:
        """``start_method``: ``spawn`` never forks; ``auto`` forks while ``fork_refusal`` has nothing to say."""
        method = self.options.start_method
        if method == "spawn":
            return False
        why = fork_refusal()
        forks = why is None or (method == "fork" and why != CANNOT_FORK)
        if why is not None and why != self._fork_refused:
            self._fork_refused = why  # said once per reason, not once per child
            if forks:
                log.warning("forking worker processes as --start-method fork says, although %s", why)
            else:
                log.debug("starting worker processes with a fresh interpreter: %s", why)
        return forks

    def _popen(self, cmd: list[str], pass_fds: tuple[int, ...]) -> subprocess.Popen[bytes]:
        # A session of its own: a signal to our process group (Ctrl-C, `timeout`) reaches us
        # alone, and the child stops when we tell it, once per request. Its stderr comes through
        # us, scrubbed (runtime.relay), and it never writes to a terminal it does not control.
        return subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE, pass_fds=pass_fds, env=self._env,
            start_new_session=True,
        )  # fmt: skip

    def _spawn(self) -> None:
        """Start one worker process and hand it its configuration.

        Any failure here is that child's death, never the fleet's: a process that could not
        be started counts as a start-up failure (bounded by ``MAX_STARTUP_FAILURES``); one
        that died before it read its configuration (``BrokenPipeError``) is reaped and
        replaced like any other dead child.
        """
        read_fd, write_fd = os.pipe()
        os.set_blocking(read_fd, False)
        board = LaneBoard.create(max(1, self.options.concurrency))
        try:
            proc = self._start(write_fd, board)
        except OSError as exc:
            os.close(read_fd)
            if board is not None:
                board.close()
            self._startup_failed(f"could not start a worker process: {type(exc).__name__}: {exc}")
            return
        finally:
            os.close(write_fd)
        child = _Child(proc=proc, fd=read_fd, started_at=time.monotonic(), board=board)
        self.children[proc.pid] = child
        asyncio.get_running_loop().add_reader(read_fd, self._on_readable, child)
        if proc.stderr is not None:
            child.relay = OutputRelay(os.dup(proc.stderr.fileno()))  # the relay owns its descriptor
            proc.stderr.close()
            asyncio.get_running_loop().add_reader(child.relay.fd, self._on_output, child)
        assert proc.stdin is not None
        try:
            proc.stdin.write((json.dumps(options_to_json(self.options)) + "\n").encode())
            proc.stdin.flush()  # stdin stays open: its EOF tells the child that we died
        except OSError as exc:
            # The child is gone (or going) before it got its configuration: make sure it is,
            # and let _reap_children replace it like any dead child.
            child.config_failed = f"{type(exc).__name__}: {exc}"
            with contextlib.suppress(OSError):
                proc.kill()

    def _startup_failed(self, why: str) -> None:
        self.startup_failures += 1
        log.error("%s", why)
        self.restart_at = time.monotonic() + 0.5 * self.startup_failures
        if self.startup_failures >= MAX_STARTUP_FAILURES:
            self._finish(ExitCode.FAILURE, f"worker processes cannot start ({self.startup_failures} in a row): {why}")

    def _on_readable(self, child: _Child) -> None:
        # Read what is there, then stop watching the pipe for EVENT_READ_PAUSE: a child writes
        # an event per item, and a reader woken by every write costs both processes a context
        # switch per item. Nothing waits on promptness: a dead child's pipe is read to the end
        # before its claims are judged (_reap_children), and the pipe holds ~1,000 events.
        self._read_events(child)
        if child.eof:
            return
        loop = asyncio.get_running_loop()
        loop.remove_reader(child.fd)
        loop.call_later(EVENT_READ_PAUSE, self._watch_again, child)

    def _on_output(self, child: _Child) -> None:
        relay = child.relay
        if relay is not None and not relay.closed and not relay.read():
            asyncio.get_running_loop().remove_reader(relay.fd)  # its end: the rest is read when it is reaped

    def _watch_again(self, child: _Child) -> None:
        if child.eof or self.children.get(child.proc.pid) is not child:
            return  # reaped meanwhile: its descriptor is closed and its number may be reused
        asyncio.get_running_loop().add_reader(child.fd, self._on_readable, child)

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
                    try:
                        event = _decode(line)
                    except ValueError:
                        log.warning("worker process %d sent an unreadable event; ignoring it", child.proc.pid)
                        continue
                    self._on_event(child, event)

    def _on_event(self, child: _Child, event: list[Any]) -> None:
        event = scrub_data(event)  # children scrub too; this also covers a child without the secret
        kind = event[0]
        if kind == ev.START:
            if child.batches:
                child.batches.pop(event[1], None)  # its START is now the lane's last word, not the board
            child.running[event[1]] = (event[2], int(event[3]))
            if self.budget_rate is not None:  # call times matter only for the keys' bound
                self._started_at[str(event[2])] = time.monotonic()
            child.unreported[event[2]] = int(event[3])
            # A claim started alone runs with nothing beside it: if the process dies before
            # another START, it is the culprit, whatever finished-but-unacknowledged claims
            # the other workers still hold.
            child.alone = child.running[event[1]] if len(event) > 4 and event[4] else None
            return
        if kind == ev.STARTS:
            # Several claims starting at once (one claim_many), none alone: each as a START.
            worker_id, timed = event[1], self.budget_rate is not None
            now = time.monotonic()
            for n in range(2, len(event) - 2, 3):
                item_id, token = str(event[n + 1]), int(event[n + 2])
                lane = f"{worker_id}#{event[n]}"
                child.running[lane] = (item_id, token)
                if child.batches:
                    child.batches.pop(lane, None)
                child.unreported[item_id] = token
                if timed:
                    self._started_at[item_id] = now
            child.alone = None
            return
        if kind == ev.BATCH:
            # A lane's batch, in the order it runs it; which item runs is on the board (read_board).
            # Announced while nothing runs alone (as STARTS): the claim last started alone has ended.
            lane, number, offset = str(event[1]), int(event[2]), int(event[3])
            pairs = [(str(event[n]), int(event[n + 1])) for n in range(4, len(event) - 1, 2)]
            known = child.batches.get(lane)
            if offset == 0:
                child.batches[lane] = (number, pairs)
                child.running.pop(lane, None)
            elif known is not None and known[0] == number and len(known[1]) == offset:
                known[1].extend(pairs)
            for item_id, token in pairs:
                child.unreported[item_id] = token
            child.alone = None
            return
        if kind == ev.READY:
            child.ready = True
            self.startup_failures = 0
        elif kind == ev.WORKER:
            child.worker_ids.add(event[1])
        elif kind == ev.WORKER_LOST:
            child.worker_ids.discard(event[1])
        elif kind == ev.RAN_DRY:
            if self.options.until_empty:
                self._ran_dry = True
                self._wakeup.set()
        elif kind == ev.FATAL:
            child.fatal = (int(event[1]), str(event[2]))
            if len(event) > 3 and event[3] == ev.STORAGE_FAULT:
                self.storage_failing = True
        elif kind == ev.BUDGET_WAIT:
            self._waits_since += float(event[1])
        elif kind == ev.EXIT:
            child.exited = (int(event[1]), str(event[2]), int(event[3]) if len(event) > 3 else 0)
        elif kind == ev.DONE:
            for item_id in event[2:]:
                child.unreported.pop(str(item_id), None)
                self._timed(str(item_id))
        elif kind in (ev.FAILED, ev.POISONED) and len(event) >= 4:
            child.unreported.pop(str(event[2]), None)
            self._timed(str(event[2]))
            self.last_errors[str(event[2])] = str(event[3])
            self.last_errors.move_to_end(str(event[2]))
            while len(self.last_errors) > LAST_ERRORS:
                self.last_errors.popitem(last=False)
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
            child.read_board()
            del self.children[pid]
            with contextlib.suppress(Exception):
                asyncio.get_running_loop().remove_reader(child.fd)
            os.close(child.fd)
            if child.relay is not None:
                with contextlib.suppress(Exception):
                    asyncio.get_running_loop().remove_reader(child.relay.fd)
                child.relay.close()  # its last words (a traceback, a fatal error), scrubbed
            if child.proc.stdin is not None:
                with contextlib.suppress(OSError):
                    child.proc.stdin.close()
            await self._on_child_exit(child, code)

    async def _on_child_exit(self, child: _Child, code: int) -> None:
        if self.metrics is not None:
            # Its in-flight gauge no longer counts; its counters stay in the fleet's totals.
            self.metrics.mark_process_dead(child.proc.pid)
        if child.exited is not None:
            # It ended on its own: its workers deregistered, their claims went back unspent,
            # except those of the workers it counts (they expire with their lease).
            self.aftermath.left_to_expire += child.exited[2]
        elif child.worker_ids or child.unreported:
            # Dead without a word: none of its claims can complete. Put them back now rather
            # than wait for the reaper, and charge the item that killed it (runtime.aftermath).
            if self.result is not None and self.result[0] == ExitCode.INTERRUPTED:
                child.stopped_by_us = True  # the operator stopped it, not an item
            budget = self._budget_for_dead_child()
            try:
                await self.aftermath.settle(child, code, budget)
            finally:
                self._child_budget = None
            if budget.spent and not budget.cut_short:
                self.storage_failing = True  # a call waited out the whole retry window
        if self.stopping or child.retiring:
            return
        if child.fatal is not None:
            self._finish(child.fatal[0], f"a worker process could not run: {child.fatal[1]}")
            return
        # A process that exits on its own before it is ready (bad handler import,
        # unreadable config) will do so again: give up after a few. One killed by a
        # signal (an operator, the OOM killer, a chaos test) says nothing about the
        # start-up itself, so it is restarted under the restart-rate limit below.
        if not child.ready and code >= 0 and child.config_failed is None:
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
                f"the last: {how_it_ended(code)})",
            )
            return
        if child.config_failed is not None:
            why = f"could not be given its configuration ({child.config_failed})"
        elif child.exited is not None:
            why = "was unhealthy" if code == EXIT_UNHEALTHY else f"exited ({child.exited[1]})"
        else:
            why = f"died ({how_it_ended(code)})"
        log.warning("worker process %d %s; starting a replacement", child.proc.pid, why)
        self.replaced += 1
        self.restart_at = max(self.restart_at, now + min(5.0, 0.05 * 2 ** len(self.restarts)))

    def _budget_for_dead_child(self) -> WaitBudget:
        """What settling a dead child may wait on storage: the stop's shared budget once stopping."""
        if self.stopping and self._stop_budget is not None:
            return self._stop_budget
        self._child_budget = WaitBudget(self.window, "the settling of a dead worker process")
        return self._child_budget

    def _finish(self, code: int, reason: str) -> None:
        if self.result is None:
            self.result = (code, reason)
        self._begin_stop()

    def _begin_stop(self) -> None:
        if not self.stopping:
            self.stopping = True
            # Children get grace to finish their items, then up to the storage's retry window
            # to deregister their workers on a store that does not answer.
            self._stop_deadline = time.monotonic() + self.options.grace + self.window + 10.0
            self._stop_budget = WaitBudget(self.window, "the fleet's stop")
            self._signal_children(signal.SIGTERM)

    # -- signals ------------------------------------------------------------
    def _on_signal(self, signum: int) -> None:
        name = signal.Signals(signum).name
        if not self.requests.note(signum):
            # `timeout` signals us and then our process group: one request, delivered twice.
            log.warning(
                "%s again within %.0fs: taken as the same request (sent to this process and to its group); "
                "send it again later to exit at once",
                name,
                ECHO_WINDOW,
            )
            return
        waiting = self._stop_budget is not None and self._stop_budget.waiting
        if self.stopping and (self.storage_failing or waiting):
            # The stop waits on storage that fails (or on a call still in flight): the operator
            # does not want to wait out its retry window.
            self._stop_waiting_for_storage(name)
        if self.requests.count == 1 and not self.stopping:
            log.warning(
                "%s: stopping; in-flight items get %.0fs to finish (send it again, a second or more later, "
                "to exit at once)",
                name,
                self.options.grace,
            )
            self._finish(ExitCode.STOPPED, f"stopped by {name}")
        elif self.requests.count == 1:
            log.warning("%s: the fleet is stopping already (again to exit at once)", name)
        else:
            reason = f"interrupted by a second {name}"
            if self.result is not None and self.result[0] not in (ExitCode.STOPPED, ExitCode.INTERRUPTED):
                reason += f" while stopping because {self.result[1]}"
            self.result = (ExitCode.INTERRUPTED, reason)
            self._hurry_children()
            self._wakeup.set()

    def _hurry_children(self) -> None:
        """Tell every child to exit at once (its second SIGTERM); what it held is then no item's fault."""
        for child in self.children.values():
            child.stopped_by_us = True
        self._signal_children(signal.SIGTERM)

    def _stop_waiting_for_storage(self, name: str) -> None:
        """A signal while the fleet stops waiting on storage: wait for it no longer, and say so."""
        log.warning(
            "%s: storage is failing; not waiting for it any longer (worker processes exit at once; "
            "claims not given back come back when their leases expire)",
            name,
        )
        self.gave_up_on_storage = name
        for budget in (self._stop_budget, self._child_budget):
            if budget is not None:
                budget.cut()
        self._hurry_children()
        self._wakeup.set()

    # -- periodic work ------------------------------------------------------
    async def _reap_gone(self) -> None:
        try:
            # Workers on this host whose process is gone (a fleet SIGKILLed beside us): at once,
            # not after reap_after. Our own children are handled when they exit.
            gone = await reap_gone(self.hive, exclude_pids=set(self.children))
        except WorkhiveError as exc:
            log.debug("checking local workers' processes failed: %s", exc)
            gone = []
        for worker in gone:
            log.warning("worker %s's process is gone: %d item(s) released", worker.worker_id, worker.released)
        self.reaped += len(gone)

    async def _reap_workers(self) -> None:
        # Bounded: a lock provider or store that stops answering must not freeze the loop that
        # also ends the run (--until-empty), stops children and answers signals.
        try:
            await asyncio.wait_for(self._reap_workers_now(), self.window + 10.0)
        except asyncio.TimeoutError:
            log.warning("reaping lost workers took longer than the storage's retry window; trying again later")

    async def _reap_workers_now(self) -> None:
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
        ours = set().union(*(c.worker_ids for c in self.children.values()))
        for worker in reaped:
            log.warning(
                "reaped lost worker %s: %d item(s) released, %d poisoned",
                worker.worker_id,
                worker.released,
                worker.poisoned,
            )
            if worker.worker_id in ours:
                # Its items' last attempts were spent here (a worker of this fleet that stopped
                # heart-beating): poisoned by this run, so its report counts them as the store does.
                self.tally.poisoned += worker.poisoned
        self.reaped += len(reaped)

    async def _fire_schedules(self) -> None:
        """Push the hive's due schedule ticks (any pool); a tick another supervisor pushed is not pushed again.

        Bounded like the reaper: a store that stops answering must not freeze the loop.
        """
        if self.storage_failing or not isinstance(self.hive.storage, StoresSchedules):
            return  # while the counts cannot be read, the loop's time goes to riding that out
        try:
            fired = await asyncio.wait_for(self.hive.schedules().fire_due(), self.window + 10.0)
        except asyncio.TimeoutError:
            log.warning("firing schedules took longer than the storage's retry window; trying again later")
            return
        except WorkhiveError as exc:
            log.warning("firing schedules failed: %s", exc)
            return
        for tick in fired:
            log.info("schedule %s fired into %s: item %s", tick.schedule, tick.pool, tick.item_id)

    def _scale(self, stats: PoolStats) -> None:
        """Apply ``workhive.autoscale.decide`` to what was observed: the backlog, idleness, the keys' bound."""
        if self.min_processes == self.max_processes:
            return
        now = time.monotonic()
        if stats.pending > 0:
            self._idle_since = None
        elif self._idle_since is None:
            self._idle_since = now
        decision = decide(
            ScaleInputs(
                ready=stats.pending,
                target=self.target,
                low=self.min_processes,
                high=self.max_processes,
                per_process=self.options.concurrency * self.options.batch,
                idle_for=0.0 if self._idle_since is None else now - self._idle_since,
                since_scale_up=now - self._last_scale_up,
                budget_processes=budget_processes(self.budget_rate, self.call_seconds, self.options.concurrency),
            )
        )
        if decision.target != self.target:
            log.info("scaling from %d to %d processes: %s", self.target, decision.target, decision.reason)
            if decision.target > self.target:
                self._last_scale_up = now
            elif self._idle_since is not None:
                self._idle_since = now  # the next step down waits its own idle period
            self.target = decision.target
        active = [c for c in self.children.values() if not c.retiring]
        for victim in sorted(active, key=lambda c: c.started_at, reverse=True)[: max(0, len(active) - self.target)]:
            victim.retiring = True
            self._signal_children(signal.SIGTERM, [victim])

    def _timed(self, item_id: str) -> None:
        """A call ended: fold how long it worked (from its START event, less budget waits) into ``call_seconds``.

        Time spent waiting for the keys' budget is not work: counted in, more workers would wait
        longer, look slower and raise the bound that let them in. Waits are reported per call
        (BUDGET_WAIT) without the item, so they are taken off in aggregate: the decayed sum of
        time from start to end, less the decayed sum of budget waits, over the decayed count.
        """
        started = self._started_at.pop(item_id, None)
        if started is None:
            return
        self._busy = CALL_DECAY * self._busy + (time.monotonic() - started)
        self._waited = CALL_DECAY * self._waited + self._waits_since
        self._calls = CALL_DECAY * self._calls + 1.0
        self._waits_since = 0.0
        self.call_seconds = max(0.0, self._busy - self._waited) / self._calls

    def _progress(self, final: bool = False) -> None:
        """Report progress. Done/poisoned/left come from one storage snapshot, so they add up."""
        if self.on_progress is None:
            return
        now = time.monotonic()
        stats = self.stats
        base = self._baseline
        if stats is not None and base is not None:
            done = max(0, stats.done - base.done)
            poisoned = max(0, stats.poisoned - base.poisoned)
        else:
            done, poisoned = self.tally.done, self.tally.poisoned
        finished = done + poisoned
        self._history.append((now, finished))
        while len(self._history) > 2 and now - self._history[0][0] > 10.0:
            self._history.popleft()
        t0, f0 = self._history[0]
        elapsed = now - self.started
        if final or now - t0 <= 0.5:
            # A run (or a window) too short for a windowed rate: the average over the whole run.
            rate = finished / elapsed if elapsed > 0 else 0.0
        else:
            rate = (finished - f0) / (now - t0)
        pending, delayed, claimed = (stats.pending, stats.delayed, stats.claimed) if stats else (0, 0, 0)
        remaining = pending + delayed + claimed
        self.on_progress(
            FleetProgress(
                pool=self.options.pool,
                elapsed=elapsed,
                done=done,
                failed=self.tally.failed,
                poisoned=poisoned,
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
                last_errors=dict(self.last_errors),
                final=final,
                budget_waits=self.tally.budget_waits,
                budget_wait_seconds=self.tally.budget_wait_seconds,
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
            try:
                await self._loop()
            except Exception as exc:
                # Never a silent exit: whatever escaped the loop is the run's reason, in the report.
                log.exception("the supervisor failed")
                self.result = (ExitCode.FAILURE, f"the supervisor failed: {type(exc).__name__}: {exc}")
            finally:
                if self.children:  # only after a second signal or a stuck drain
                    for child in self.children.values():
                        child.stopped_by_us = True  # killed by us: no item is to blame
                    self._signal_children(signal.SIGKILL)
                    for child in list(self.children.values()):
                        with contextlib.suppress(Exception):
                            child.proc.wait(timeout=2.0)
                    await self._reap_children()
            await self._read_final_stats()
        finally:
            # Only now: a signal during the stop's storage calls above still cuts them short.
            for sig in handled:
                loop.remove_signal_handler(sig)
        return self._report()

    async def _read_final_stats(self) -> None:
        """The pool as the run ended, for the final progress line; a failing store is not asked once more."""
        if self.storage_failing:
            return
        if self._drained_at_read:
            return  # the read that found the pool drained is its last state: nothing was left to change it
        budget = self._stop_budget or WaitBudget(self.window, "the fleet's stop")
        with contextlib.suppress(Exception):
            self.stats = await budget.call("reading the pool's final counts", self.pool.stats())

    async def _loop(self) -> None:
        next_stats = next_reap = next_progress = next_gone = next_fire = 0.0
        reap_every = max(0.5, self.options.reap_after / 2)
        self._wakeup.set()  # the first pass at once: children start without waiting a TICK
        while True:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._wakeup.wait(), self._pause())
            self._wakeup.clear()
            await self._reap_children()
            now = time.monotonic()
            if self.result is not None and self.result[0] == ExitCode.INTERRUPTED:
                return
            if self.stopping:
                if not self.children:
                    return
                if now > self._stop_deadline:
                    log.error(
                        "worker processes did not stop within grace + the storage's retry window + 10s; killing them"
                    )
                    return
                continue
            # Children start before anything here asks the store (the counts, the reaper, the
            # schedules, the local check): a worker process takes a good part of a second to import
            # and register, and the supervisor's calls overlap it instead of delaying it. A few
            # children per pass: signals, events and the stop flag are handled between batches,
            # so SIGTERM during the start of a large fleet acts at once.
            self._spawn_some()
            if now >= next_stats or self._early_read_due(now):
                self._ran_dry = False
                settled = self._settled()
                try:
                    before = self.stats
                    self.stats = await self.pool.stats()
                except WorkhiveError as exc:
                    next_stats = now + self._storage_fault(exc, now)
                    continue
                else:
                    read_at, last_read_at = time.monotonic(), self._stats_read_at
                    self._stats_read_at = read_at
                    gap = stats_gap(
                        read_at - now,
                        remaining(self.stats),
                        None if before is None or last_read_at is None else remaining(before),
                        None if last_read_at is None else read_at - last_read_at,
                    )
                    next_stats = read_at + gap
                    self._early_read_at = read_at + max(TICK, RAN_DRY_COST_FACTOR * (read_at - now))
                    self._stale_read_at = read_at + (read_at - now)
                    self._settled_at_read = settled
                    if self._baseline is None:
                        self._baseline = self.stats
                    self.storage_failing = False
                    if self.storage_failures:
                        log.warning("storage answers again after %d failed reads", self.storage_failures)
                        self.storage_failures = 0
                    await self._sample_metrics()
                    if self.options.until_empty and remaining(self.stats) == 0:
                        self._drained_at_read = self.result is None  # the run's reason, not a later one
                        self._finish(ExitCode.DRAINED, "the pool drained")
                        continue
                    self._scale(self.stats)
                    self._spawn_some()  # what the counts scaled up to starts now, not a pass later
            if now >= next_reap:
                next_reap = now + reap_every
                await self._reap_workers()
            if now >= next_fire:
                next_fire = now + SCHEDULES_EVERY
                await self._fire_schedules()
            if now >= next_gone:
                next_gone = now + GONE_EVERY
                await self._reap_gone()
            if now >= next_progress:
                next_progress = now + PROGRESS_EVERY
                self._progress()

    def _spawn_some(self) -> None:
        """Start children up to the target, at most SPAWN_PER_TICK of them."""
        for _ in range(SPAWN_PER_TICK):
            active = sum(1 for c in self.children.values() if not c.retiring)
            if active >= self.target or time.monotonic() < self.restart_at or self.result is not None:
                return
            self._spawn()

    def _settled(self) -> int:
        """Items this fleet's processes have reported finished, failed, poisoned, released or cancelled."""
        t = self.tally
        return t.done + t.failed + t.poisoned + t.released + t.cancelled

    def _early_read_at_the_soonest(self) -> float | None:
        """When a worker ran dry (``--until-empty``): the soonest the counts may be read early (RAN_DRY_COST_FACTOR)."""
        if not self._ran_dry:
            return None
        return self._stale_read_at if self._settled() > self._settled_at_read else self._early_read_at

    def _pause(self) -> float:
        """Seconds the loop waits for an event: TICK, or less when an early read of the counts falls due sooner."""
        due = self._early_read_at_the_soonest()
        return TICK if due is None else min(TICK, max(0.0, due - time.monotonic()))

    def _early_read_due(self, now: float) -> bool:
        """A worker ran dry and the counts may be read before they are due."""
        due = self._early_read_at_the_soonest()
        return due is not None and now >= due

    async def _sample_metrics(self) -> None:
        """With --metrics-port: the storage gauges (pool depth, oldest age, workers), fleet-wide."""
        if self.metrics is None:
            return
        try:
            await self.metrics.sample(self.hive, [self.options.pool])
        except WorkhiveError as exc:  # a missed sample is not worth stopping the fleet for
            log.debug("sampling metrics failed: %s", exc)
        if self.stats is not None:
            self.metrics.observe_admissible(self.options.pool, admissible_items(self.stats.pending, self.budget_rate))

    def _storage_fault(self, exc: WorkhiveError, started: float) -> float:
        """One failed statistics read (begun at ``started``): warn once, back off, give up on a fault that lasts.

        A corrupt database does not heal: the run ends at once. Anything else (a full disk, a
        locked or unreachable store) is retried with doubling pauses, and the run ends with the
        reason after ``MAX_STORAGE_FAILURES`` failures in a row, or sooner once the reads have
        kept failing for longer than the storage's retry window: each read of a backend that
        reconnects on its own (``?retry_for=``) failed only after retrying that long, so eight of
        them would make minutes of an outage the URL says to wait out for seconds. Returns the
        seconds until the next try.
        """
        self.storage_failures += 1
        self.storage_failing = True
        if self.storage_failures == 1:
            self._failing_since = started
        failing_for = time.monotonic() - self._failing_since
        if isinstance(exc, StorageCorrupt):
            self._finish(ExitCode.FAILURE, f"storage is corrupt: {exc}")
            return STATS_EVERY
        if self.storage_failures >= MAX_STORAGE_FAILURES or (self.storage_failures >= 2 and failing_for >= self.window):
            self._finish(
                ExitCode.FAILURE,
                f"storage kept failing ({self.storage_failures} reads in a row, for {failing_for:.0f}s; its retry "
                f"window is {self.window:g}s): {type(exc).__name__}: {exc}",
            )
            return STATS_EVERY
        pause = min(STORAGE_RETRY_MAX, STATS_EVERY * 2**self.storage_failures)
        (log.warning if self.storage_failures == 1 else log.debug)(
            "reading pool statistics failed (%s: %s); retrying, the run ends after %d failures in a row",
            type(exc).__name__,
            exc,
            MAX_STORAGE_FAILURES,
        )
        return pause

    def _report(self) -> FleetReport:
        code, reason = (
            self.result if self.result is not None else (ExitCode.FAILURE, "the supervisor stopped unexpectedly")
        )
        # Say what storage now holds: what was put back, and what (if anything) waits for its lease.
        after = self.aftermath
        if code == ExitCode.INTERRUPTED:
            reason += f"; {after.put_back} in-flight or claimed item(s) put back without spending an attempt"
        if self.gave_up_on_storage is not None:
            reason += f"; stopped waiting for storage on {self.gave_up_on_storage}"
        if after.left_to_expire:
            reason += (
                f"; the claims of {after.left_to_expire} worker(s) could not be released and expire with their lease"
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
            workers_lost=self.tally.workers_lost + self.reaped + after.lost_with_process,
            processes_replaced=self.replaced,
            elapsed=time.monotonic() - self.started,
            exit_code=code,
            reason=scrub(reason),
            budget_waits=self.tally.budget_waits,
            cancelled=self.tally.cancelled,
        )
