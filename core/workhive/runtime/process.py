"""A worker process: one hive, ``concurrency`` async workers, heartbeats, signals.

The supervisor starts each process as ``python -m workhive.runtime``
and writes its configuration (JSON) as the first line of the child's stdin,
keeping stdin open afterwards: EOF on stdin means the supervisor died, and
the process drains and exits instead of running on as an orphan. Events go
back on a pipe whose descriptor is given with ``--events-fd``.

Why a re-exec and not ``multiprocessing``: the spawn start method re-imports
the caller's ``__main__`` in every child (a trap for scripts without a main
guard, notebooks and ``python -c``); a plain ``python -m`` child depends on
nothing but the installed package and shows up plainly in ``ps``.

Signals: the first SIGTERM stops claiming, lets in-flight items finish within
``grace`` seconds, releases the rest without spending attempts and
deregisters; a second SIGTERM exits at once (leases then expire and the
reaper or another claim picks the items up). SIGINT is ignored: a Ctrl-C on
the terminal reaches the whole process group, and the supervisor turns it
into SIGTERMs so that one key press counts once.

``ProcessRuntime`` also runs in-process (tests, embedding): see ``run``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import attrs

import workhive
from workhive.errors import ConfigError, WorkerLost, WorkerNotFound, WorkhiveError
from workhive.hive import Hive
from workhive.plugin_manager import PluginManager
from workhive.runtime import events as ev
from workhive.runtime.handler import Handler, load_handler
from workhive.runtime.health import HealthPolicy
from workhive.runtime.options import ExitCode, FleetOptions
from workhive.runtime.worker import Worker

__all__ = ["EXIT_UNHEALTHY", "IdleWaiter", "ProcessRuntime", "main"]

log = logging.getLogger("workhive.runtime.process")

#: a process whose workers spent their recovery budget exits with this; the supervisor replaces it
EXIT_UNHEALTHY = 3

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
    ) -> None:
        self.options = options
        self.hive = hive
        self.pool = hive.pool(options.pool)
        self.handler = handler if handler is not None else load_handler(options.handler)
        self.emit: ev.EventSink = sink if sink is not None else ev.ListSink()
        self.health_policy = health_policy or HealthPolicy()
        self.handler_logger = logging.getLogger(f"workhive.handler.{options.pool}")
        self.executor = ThreadPoolExecutor(
            max_workers=max(1, options.concurrency), thread_name_prefix="workhive-handler"
        )
        self.credentials: Any = None
        self.credential_timeout = 30.0
        self.stop_event = asyncio.Event()
        self.workers: list[Worker] = []
        self.exit = _Exit()
        self.idle = IdleWaiter(self)

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

    async def report_credential(self, credential: Any, outcome: str, **kwargs: Any) -> None:
        from workhive.credentials import Outcome

        try:
            await self.credentials.report(credential, getattr(Outcome, outcome), **kwargs)
        except WorkhiveError as exc:  # a cooldown that could not be shared is not worth losing the item over
            log.warning("reporting %s for credential %s failed: %s", outcome, getattr(credential, "name", "?"), exc)

    # -- lifecycle ----------------------------------------------------------
    async def _setup_credentials(self) -> None:
        if not self.options.credentials:
            return
        self.credentials = build_credentials(self.options, self.hive)

    async def _heartbeat_loop(self) -> None:
        interval = self.options.heartbeat
        while True:
            await asyncio.sleep(interval)
            for worker in list(self.workers):
                if worker.lost:
                    continue
                try:
                    await self.hive.workers.heartbeat(worker.worker_id)
                except (WorkerLost, WorkerNotFound):
                    worker.lost = True
                except WorkhiveError as exc:
                    # Missing one beat is harmless as long as the next one lands before reap_after.
                    log.warning("heartbeat of %s failed: %s", worker.worker_id, exc)

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
        for slot in range(max(1, self.options.concurrency)):
            worker = Worker(self, slot)
            await worker.register()
            self.workers.append(worker)
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
                    len(late),
                    self.options.grace,
                )
                for task in late:
                    task.cancel()
                await asyncio.wait(late, timeout=1.0)
        finally:
            if watcher is not None:
                watcher.cancel()
            for worker in self.workers:
                try:
                    await worker.deregister()
                except WorkhiveError as exc:
                    log.warning(
                        "deregistering %s failed (the reaper will release its items): %s", worker.worker_id, exc
                    )
            heartbeat.cancel()
            self.executor.shutdown(wait=False, cancel_futures=True)
        return self.exit.code


def _all_disabled(snapshot: Any) -> bool:
    return bool(snapshot) and all(state.state == "disabled" for state in snapshot)


def build_credentials(options: FleetOptions, hive: Hive) -> Any:
    """The fleet's ``CredentialPool`` (cooldowns shared through the hive), or None without credentials."""
    if not options.credentials:
        return None
    from workhive.credentials import DEFAULT_NAMESPACE, CredentialPool

    return CredentialPool.from_specs(
        list(options.credentials), manager=hive.manager, shared=hive.shared(DEFAULT_NAMESPACE)
    )


def _open_hive(options: FleetOptions) -> Hive:
    manager = PluginManager(entry_points=not options.no_plugins, on_error="warn")
    return workhive.open(
        options.storage,
        locks=options.locks,
        backoff=options.backoff,
        manager=manager,
        lease=options.lease,
        max_attempts=options.max_attempts,
        reap_after=options.reap_after,
    )


def options_to_json(options: FleetOptions) -> dict[str, Any]:
    return attrs.asdict(options, recurse=False) | {"credentials": list(options.credentials)}


def options_from_json(data: dict[str, Any]) -> FleetOptions:
    return FleetOptions(**data)


async def _child_main(options: FleetOptions, sink: ev.PipeSink) -> int:
    loop = asyncio.get_running_loop()
    try:
        handler = load_handler(options.handler)
        hive = _open_hive(options)
        await hive.open()
    except ConfigError as exc:
        sink(ev.FATAL, ExitCode.CONFIG, str(exc))
        return ExitCode.CONFIG
    except WorkhiveError as exc:
        sink(ev.FATAL, ExitCode.FAILURE, f"{type(exc).__name__}: {exc}")
        return ExitCode.FAILURE
    runtime = ProcessRuntime(options, hive=hive, handler=handler, sink=sink)
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
        return await runtime.run()
    except WorkhiveError as exc:
        sink(ev.FATAL, ExitCode.FAILURE, f"{type(exc).__name__}: {exc}")
        return ExitCode.FAILURE
    finally:
        with contextlib.suppress(Exception):
            loop.remove_reader(sys.stdin.fileno())
        await hive.close()


def _check_parent(runtime: ProcessRuntime) -> None:
    try:
        data = os.read(sys.stdin.fileno(), 4096)
    except OSError:
        data = b""
    if not data:
        asyncio.get_running_loop().remove_reader(sys.stdin.fileno())
        runtime.request_stop(0, "the supervisor exited")


def main(argv: list[str] | None = None) -> None:
    """Entry point of a worker process (``python -m workhive.runtime --events-fd N``)."""
    parser = argparse.ArgumentParser(prog="python -m workhive.runtime")
    parser.add_argument("--events-fd", type=int, required=True)
    parser.add_argument("--log-level", default="WARNING")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(process)d %(name)s %(levelname)s %(message)s")
    sink = ev.PipeSink(args.events_fd)
    line = sys.stdin.readline()
    try:
        options = options_from_json(json.loads(line))
    except (ValueError, TypeError) as exc:
        sink(ev.FATAL, ExitCode.CONFIG, f"bad process configuration on stdin: {exc}")
        os._exit(ExitCode.CONFIG)
    code = asyncio.run(_child_main(options, sink))
    sys.stdout.flush()
    sys.stderr.flush()
    # os._exit: a sync handler still running in a thread after the grace period
    # must not keep the process alive through the executor's atexit join.
    os._exit(code)
