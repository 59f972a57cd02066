"""A worker process: one hive, one worker with up to ``concurrency`` items in flight, heartbeats, signals.

``main`` is ``python -m workhive.runtime``: it reads its ``FleetOptions`` from
stdin (EOF later means the supervisor died), sends events on ``--events-fd``,
drains on the first SIGTERM and exits at once on the second, and ends with an
``EXIT`` event. ``ProcessRuntime`` holds what its ``Worker`` objects share and
also runs in-process (tests, embedding): see ``run``. Design:
``docs/runtime.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import json
import logging
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import attrs

from workhive.errors import (
    ConfigError,
    StorageCorrupt,
    StorageError,
    WorkerLost,
    WorkerNotFound,
    WorkhiveError,
)
from workhive.group_budgets import GroupBudgets
from workhive.hive import Hive
from workhive.runtime import events as ev
from workhive.runtime.board import LaneBoard
from workhive.runtime.counts import SharedCounts
from workhive.runtime.handler import Handler, load_handler
from workhive.runtime.health import HealthPolicy
from workhive.runtime.isolation import SUSPECTS, IsolationGate, Suspects
from workhive.runtime.key_slots import build_slots
from workhive.runtime.keys import Keys
from workhive.runtime.options import ExitCode, FleetOptions
from workhive.runtime.patience import WaitBudget, open_within_window, retry_window
from workhive.runtime.shared import (
    EXIT_UNHEALTHY,
    PATH_AFTER_ENV,
    PLUGINS_FOUND_ENV,
    build_budgets,
    build_credentials,
    found_from_env,
    metrics_enabled,
    open_hive,
    options_from_json,
)
from workhive.runtime.worker import Worker
from workhive.storage import Cancels
from workhive.terminal import log_to_stderr

if TYPE_CHECKING:
    from workhive.budgets import FleetBudgets
    from workhive.credentials import CredentialPool
    from workhive.plugin_manager import FoundPlugin

__all__ = ["IdleWaiter", "ProcessRuntime", "main"]

log = logging.getLogger("workhive.runtime.process")

#: without backend wake-ups, an idle process polls at most this far apart (pickup latency bound)
IDLE_POLL_MIN = 0.005
IDLE_POLL_MAX = 0.05
#: with wake-ups (``notify``) the timeout is only a safety net
IDLE_NOTIFY_TIMEOUT = 2.0


class IdleWaiter:
    """Idle workers of one process share a single ``wait_for_work``, with backoff.

    However many workers are idle, the process makes one storage call per
    wait: a backend with wake-ups (``notify``) returns on push, others are
    polled from ``IDLE_POLL_MIN`` doubling up to ``IDLE_POLL_MAX`` seconds.
    """

    def __init__(self, runtime: ProcessRuntime) -> None:
        self._rt = runtime
        self._notify = "notify" in runtime.hive.storage.capabilities
        self._timeout = IDLE_NOTIFY_TIMEOUT if self._notify else IDLE_POLL_MIN
        self._task: asyncio.Task[None] | None = None

    def found_work(self) -> None:
        if not self._notify:
            self._timeout = IDLE_POLL_MIN

    async def _wait_once(self) -> None:
        timeout = self._timeout
        try:
            await self._rt.pool.wait_for_work(timeout)
        except WorkhiveError as exc:
            log.warning("waiting for work failed: %s", exc)
            await asyncio.sleep(timeout)
        if not self._notify:
            self._timeout = min(IDLE_POLL_MAX, timeout * 2)

    def cancel(self) -> None:
        """Stop the wait in flight: the process is ending, and its storage closes after this."""
        if self._task is not None:
            self._task.cancel()

    async def wait(self) -> None:
        """Return when work may be there, or when the process starts stopping."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._wait_once())
        stop = asyncio.ensure_future(self._rt.stop_event.wait())
        try:
            await asyncio.wait({self._task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()


@attrs.define
class _Exit:
    code: int = 0
    reason: str = ""


class ProcessRuntime:
    """The workers of one process and everything they share.

    >>> async def main():  # doctest: +SKIP
    ...     async with workhive.open("memory://") as hive:
    ...         runtime = ProcessRuntime(FleetOptions(pool="jobs", handler="mymod:handle"), hive=hive)
    ...         code = await runtime.run(stop_when_empty=True)
    """

    def __init__(
        self,
        options: FleetOptions,
        *,
        hive: Hive,
        handler: Handler | None = None,
        sink: ev.EventSink | None = None,
        health_policy: HealthPolicy | None = None,
        board: LaneBoard | None = None,
    ) -> None:
        self.options = options
        #: the lane board its supervisor reads if this process dies (runtime.board); None: a START per item
        self.board = board
        self.hive = hive
        self.pool = hive.pool(options.pool)
        self.handler = handler if handler is not None else load_handler(options.handler)
        self.emit: ev.EventSink = sink if sink is not None else ev.ListSink()
        self.health_policy = health_policy or HealthPolicy()
        self.handler_logger = logging.getLogger(f"workhive.handler.{options.pool}")
        self.executor = ThreadPoolExecutor(
            max_workers=max(1, options.concurrency), thread_name_prefix="workhive-handler"
        )
        self.credentials: CredentialPool | None = None
        self.budgets: FleetBudgets | None = None  # when any key has a budget (or limits are learned)
        self.stop_event = asyncio.Event()
        self.workers: list[Worker] = []
        self.exit = _Exit()
        self.idle = IdleWaiter(self)
        self.gate = IsolationGate()
        self.heartbeat_failures = 0  # in a row, across this process's workers
        self.not_deregistered = 0  # workers whose claims could not be given back as the process stopped
        self.suspects = Suspects(hive.shared(SUSPECTS), self.pool.name)
        # workhive.metrics when this fleet serves --metrics-port, else None (prometheus-client never imported)
        self.metrics: Any = importlib.import_module("workhive.metrics") if metrics_enabled(options) else None
        self.counts = SharedCounts(hive, self.pool.name)  # for the dashboard's charts
        self.keys = self._keys()  # without keys until run() reads --credentials
        self.group_budgets = GroupBudgets(hive, self.pool.name)  # tenant budgets, charged from ctx.report_usage

    # -- state shared with workers -----------------------------------------
    @property
    def stopping(self) -> bool:
        return self.stop_event.is_set()

    def request_stop(self, code: int = 0, reason: str = "") -> None:
        """Stop claiming; in-flight items get ``grace`` seconds. The first reason given wins."""
        if not self.stop_event.is_set():
            self.exit = _Exit(code, reason)
            self.stop_event.set()

    async def sleep(self, seconds: float) -> None:
        """Sleep, but wake at once when the process starts stopping."""
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self.stop_event.wait(), seconds)

    def storage_failed(self, exc: WorkhiveError, tries: int) -> None:
        """Storage keeps failing (or is corrupt): stop this process and tell the supervisor to end the run."""
        what = (
            "is corrupt" if isinstance(exc, StorageCorrupt) else f"kept failing ({tries} calls with no item finished)"
        )
        reason = f"storage {what}: {type(exc).__name__}: {exc}"
        log.error("%s; stopping", reason)
        # Marked as a storage fault: the supervisor then blames no item for this process's end.
        self.emit(ev.FATAL, ExitCode.FAILURE, reason, ev.STORAGE_FAULT)
        self.request_stop(ExitCode.FAILURE, reason)

    def handler_ended_process(self, reason: str) -> None:
        """A handler raised what ends a process (``SystemExit``, ``KeyboardInterrupt``…): stop, to be replaced.

        The worker charges the item that did it; the other items in flight finish
        within ``grace`` (or go back unspent), as on SIGTERM.
        """
        log.error("%s; the process stops and the supervisor replaces it", reason)
        self.request_stop(ExitCode.FAILURE, reason)

    def worker_unhealthy(self, worker: Worker) -> None:
        log.error(
            "worker %s kept failing after %d pauses; the process drains and exits so a fresh one replaces it",
            worker.worker_id,
            self.health_policy.recovery_pauses,
        )
        self.request_stop(EXIT_UNHEALTHY, f"worker {worker.worker_id} kept failing after its recovery budget")

    def no_credentials(self, exc: Exception) -> None:
        """Stop the process when no credential can ever come back (all disabled)."""
        snapshot = self.credentials.snapshot() if self.credentials is not None else None
        if snapshot is not None and _all_disabled(snapshot):
            self.emit(ev.FATAL, ExitCode.FAILURE, f"every credential is disabled: {exc}")
            self.request_stop(ExitCode.FAILURE, f"every credential is disabled: {exc}")

    # -- lifecycle ----------------------------------------------------------
    def _keys(self) -> Keys:
        keys = Keys(
            self.credentials,
            self.budgets,
            handler=self.handler,
            options=self.options,
            emit=self.emit,
            sleep=self.sleep,
            stopping=lambda: self.stopping,
            metrics=self.metrics,
        )
        keys.counts = self.counts
        keys.slots = build_slots(self.credentials.credentials() if self.credentials else None, self.hive)
        return keys

    async def _setup_credentials(self) -> None:
        if not self.options.credentials:
            return
        self.credentials = build_credentials(self.options, self.hive)
        self.budgets = build_budgets(self.options, self.hive, self.credentials)
        self.keys = self._keys()

    async def _heartbeat_loop(self) -> None:
        interval = self.options.heartbeat
        # A beat also carries cancellations: the worker reads its running claims back (Pool.cancel).
        cancels = isinstance(self.hive.storage, Cancels)
        while True:
            await asyncio.sleep(interval)
            self.counts.publish_soon()
            for worker in list(self.workers):
                # A beat renews every lease the worker holds: never for one that deregistered (or
                # tried to), was reaped, or gave up on claims storage would not settle.
                if not worker.heartbeat_wanted:
                    continue
                try:
                    await self.hive.workers.heartbeat(worker.worker_id)
                except (WorkerLost, WorkerNotFound):
                    worker.lost = True
                except WorkhiveError as exc:
                    # Missing one beat is harmless as long as the next one lands before reap_after.
                    # Say it once per streak: a store that stays down would otherwise fill the log.
                    self.heartbeat_failures += 1
                    (log.warning if self.heartbeat_failures == 1 else log.debug)(
                        "heartbeat of %s failed: %s", worker.worker_id, exc
                    )
                else:
                    if self.heartbeat_failures:
                        log.warning("heartbeats land again after %d failures", self.heartbeat_failures)
                        self.heartbeat_failures = 0
                    for running in list(worker.running.values()):
                        await worker.write_progress(running.item, running.ctx)  # at most one write a beat
                    if worker.running and cancels:
                        await worker.check_cancelled()
                    worker.report_in_flight()

    async def _watch_empty(self) -> None:
        while not self.stopping:
            stats = await self.pool.stats()
            if stats.pending + stats.delayed + stats.claimed == 0:
                self.request_stop(ExitCode.DRAINED, "the pool drained")
                return
            await self.sleep(0.05)

    async def run(self, *, stop_when_empty: bool = False) -> int:
        """Run the workers until ``request_stop`` (or, with ``stop_when_empty``, until the pool drains).

        Returns the process exit code (0 after a clean stop). The caller owns the hive.
        """
        await self._setup_credentials()
        # One worker holds every item in flight (--concurrency of them): one registry row, one
        # heartbeat call a beat however many items wait. Its registration proves the storage works (READY).
        self.workers = [Worker(self)]
        await self.workers[0].register()
        self.emit(ev.READY, os.getpid())
        heartbeat = asyncio.create_task(self._heartbeat_loop())
        watcher = asyncio.create_task(self._watch_empty()) if stop_when_empty else None
        tasks = [asyncio.create_task(w.run()) for w in self.workers]
        try:
            stop = asyncio.create_task(self.stop_event.wait())
            await asyncio.wait([*tasks, stop], return_when=asyncio.FIRST_COMPLETED)
            # A worker task ending on its own (unhealthy) stops the others too.
            if not self.stopping:
                for task in tasks:
                    if task.done() and task.exception() is not None:
                        exc = task.exception()
                        log.error("a worker crashed: %r", exc)
                        self.request_stop(ExitCode.FAILURE, f"a worker crashed: {exc!r}")
                        break
                else:
                    await self.stop_event.wait()
            stop.cancel()
            _, late = await asyncio.wait(tasks, timeout=self.options.grace)
            if late:
                log.warning(
                    "%d item(s) still running after the %.0fs grace period; releasing them (no attempt spent)",
                    sum(w.items_in_flight for w in self.workers),
                    self.options.grace,
                )
                for task in late:
                    task.cancel()
                await asyncio.wait(late, timeout=1.0)
        finally:
            if watcher is not None:
                watcher.cancel()
            # A shared wait still in flight would outlive the run and meet the closed storage
            # ("waiting for work failed: ... is not open", logged by idle PostgreSQL workers at a fleet's end).
            self.idle.cancel()
            await self._deregister_all()
            heartbeat.cancel()
            await self.counts.close()
            self.executor.shutdown(wait=False, cancel_futures=True)
        return self.exit.code

    async def _deregister_all(self) -> None:
        """Settle what storage left unanswered, then deregister every worker (claims go back unspent), side by side.

        All of it waits on storage for at most the storage's retry window: on a dead
        store the process exits after that, not after one window per worker. Workers
        that could not be deregistered are counted in ``not_deregistered``.
        """
        budget = WaitBudget(retry_window(self.hive.storage), "the worker process's stop")

        async def settle_then_deregister(worker: Worker) -> None:
            # Unanswered completions, failures and releases first: deregistering refunds every
            # claim the worker still holds, whether or not storage applied its settlement.
            await worker.settle_before_exit()
            if worker.registered:
                await worker.deregister()

        async def deregister(worker: Worker) -> bool:
            try:
                await budget.call(f"settling and deregistering {worker.worker_id}", settle_then_deregister(worker))
            except WorkhiveError as exc:
                log.warning(
                    "deregistering %s failed (its claims come back when their leases expire): %s",
                    worker.worker_id,
                    exc,
                )
                return False
            return True

        done = await asyncio.gather(*(deregister(w) for w in self.workers if w.registered or w.unsettled))
        self.not_deregistered = done.count(False)


#: descriptors a process needs besides one per item in flight (storage connections, pipes, logs)
SPARE_DESCRIPTORS = 256


def fit_descriptor_limit(concurrency: int) -> str | None:
    """Raise the soft limit on open files to fit ``concurrency`` items holding a connection each.

    Returns a warning when the hard limit is too low for that (handlers that only wait
    need no descriptor; those holding a socket would fail with "too many open files").
    """
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    needed = concurrency + SPARE_DESCRIPTORS
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= needed:
        return None
    target = needed if hard == resource.RLIM_INFINITY else min(hard, needed)
    if target > soft:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    if target < needed:
        return (
            f"--concurrency {concurrency} may need {needed} open files (one per item whose handler holds a "
            f"connection) but this process may open {target} (ulimit -n); raise the hard limit or lower --concurrency"
        )
    return None


def _all_disabled(snapshot: Any) -> bool:
    return bool(snapshot) and all(state.state == "disabled" for state in snapshot)


def _fatal_text(exc: WorkhiveError) -> str:
    """What ends a worker process, for the run's reason: a storage failure says it was the storage.

    (An ``OutcomeUnknown`` from a server restarting under a registration once read
    "a worker process could not run: OutcomeUnknown: ...", naming no storage.)
    """
    text = f"{type(exc).__name__}: {exc}"
    return f"storage failed: {text}" if isinstance(exc, StorageError) else text


async def _child_main(
    options: FleetOptions,
    sink: ev.PipeSink,
    found: tuple[str, tuple[FoundPlugin, ...]] | None = None,
    board: LaneBoard | None = None,
) -> int:
    loop = asyncio.get_running_loop()
    short = fit_descriptor_limit(options.concurrency)
    if short is not None:
        log.warning("%s", short)
    try:
        handler = load_handler(options.handler)
        hive = open_hive(options, found)
        await open_within_window(hive)  # a store out for a moment must not end a replacement process
    except ConfigError as exc:
        sink(ev.FATAL, ExitCode.CONFIG, str(exc))
        return ExitCode.CONFIG
    except WorkhiveError as exc:
        sink(ev.FATAL, ExitCode.FAILURE, _fatal_text(exc))
        return ExitCode.FAILURE
    runtime = ProcessRuntime(options, hive=hive, handler=handler, sink=sink, board=board)
    signals_seen = 0

    def on_term() -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen > 1:
            # Second signal: leave at once; our leases expire and others take the items.
            os._exit(ExitCode.INTERRUPTED)
        runtime.request_stop(0, "stopped by signal")

    loop.add_signal_handler(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # EOF on stdin: the supervisor is gone. Drain like on SIGTERM rather than run unsupervised.
    loop.add_reader(sys.stdin.fileno(), lambda: _check_parent(runtime))
    try:
        code = await runtime.run()
        reason = runtime.exit.reason
    except WorkhiveError as exc:
        reason = _fatal_text(exc)
        sink(ev.FATAL, ExitCode.FAILURE, reason, *([ev.STORAGE_FAULT] if isinstance(exc, StorageError) else []))
        code = ExitCode.FAILURE
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(sys.stdin.fileno())
        # Closing drops connections; bounded all the same, so a dead store cannot hold the exit.
        with contextlib.suppress(Exception):
            await asyncio.wait_for(hive.close(), retry_window(hive.storage))
    # The last word: this process ends on its own, its workers deregistered (or counted).
    sink(ev.EXIT, code, reason or "stopped", runtime.not_deregistered)
    return code


def _check_parent(runtime: ProcessRuntime) -> None:
    try:
        data = os.read(sys.stdin.fileno(), 4096)
    except OSError:
        data = b""
    if not data:
        asyncio.get_running_loop().remove_reader(sys.stdin.fileno())
        runtime.request_stop(0, "the supervisor exited")


def _attach_board(fd: int | None, options: FleetOptions) -> LaneBoard | None:
    """The supervisor's lane board for this process's lanes, if it passed one; None: a START event per item."""
    if fd is None:
        return None
    try:
        return LaneBoard.attach(fd, max(1, options.concurrency))
    except (OSError, ValueError) as exc:
        log.debug("no lane board (%s): every item is announced as it starts", exc)
        return None


def main(argv: list[str] | None = None) -> None:
    """Entry point of a worker process (``python -m workhive.runtime --events-fd N``)."""
    for entry in os.environ.pop(PATH_AFTER_ENV, "").split(os.pathsep):  # the parent's order (see _child_env)
        if entry and entry not in sys.path:
            sys.path.append(entry)
    # Popped like the path: a handler's own subprocesses are not worker processes.
    found = found_from_env(os.environ.pop(PLUGINS_FOUND_ENV, ""))
    parser = argparse.ArgumentParser(prog="python -m workhive.runtime")
    parser.add_argument("--events-fd", type=int, required=True)
    parser.add_argument("--log-level", default="WARNING")
    parser.add_argument("--board-fd", type=int, default=None)
    args = parser.parse_args(argv)
    log_to_stderr(args.log_level)  # handler errors are logged: their control characters are escaped
    sink = ev.PipeSink(args.events_fd)
    line = sys.stdin.readline()
    try:
        options = options_from_json(json.loads(line))
    except (ValueError, TypeError) as exc:
        sink(ev.FATAL, ExitCode.CONFIG, f"bad process configuration on stdin: {exc}")
        os._exit(ExitCode.CONFIG)
    board = _attach_board(args.board_fd, options)
    code = asyncio.run(_child_main(options, sink, found, board))
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: a sync handler still running in a thread after the grace period
    # must not keep the process alive through the executor's atexit join.
    os._exit(code)
