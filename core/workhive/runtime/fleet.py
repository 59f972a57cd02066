"""``run_fleet``: the public entry point of the fleet runtime (``workhive work``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator

from workhive.defaults import START_METHODS, default_locks_url
from workhive.errors import ConfigError, WorkhiveError
from workhive.hive import Hive
from workhive.runtime.handler import load_handler
from workhive.runtime.options import MAX_CONCURRENCY, MAX_PROCESSES, FleetOptions, FleetReport
from workhive.runtime.patience import open_within_window
from workhive.runtime.progress import FleetProgress, renderer_for
from workhive.runtime.shared import build_budgets, build_credentials, open_hive
from workhive.runtime.supervisor import Supervisor
from workhive.urls import redact_url
from workhive.validation import check_name

__all__ = ["run_fleet", "check_options"]


def check_options(options: FleetOptions) -> None:
    """Raise ``ConfigError`` naming the first option that cannot work; change nothing."""

    def count(name: str, value: object, minimum: int = 1) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")

    def seconds(name: str, value: object, *, zero_ok: bool = False) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (value == 0 and not zero_ok):
            raise ConfigError(f"{name} must be a number of seconds {'>= 0' if zero_ok else '> 0'}, got {value!r}")
        return float(value)

    try:
        check_name("pool", options.pool)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    count("processes", options.processes)
    count("concurrency", options.concurrency)
    if not options.allow_large_fleet:
        for name, value, limit in (
            ("processes", options.processes, MAX_PROCESSES),
            ("max_processes", options.max_processes, MAX_PROCESSES),
            ("concurrency", options.concurrency, MAX_CONCURRENCY),
        ):
            if isinstance(value, int) and value > limit:
                raise ConfigError(
                    f"{name} {value} is over the limit of {limit}; if you mean it, pass --allow-large-fleet "
                    "(allow_large_fleet=True): every process costs tens of MB, every item in flight a few KB and, "
                    "while its handler holds a connection, a file descriptor"
                )
    seconds("budget_wait", options.budget_wait)
    if options.timeout is not None:
        seconds("timeout (--timeout)", options.timeout)
    estimate = options.token_estimate
    if isinstance(estimate, bool) or not isinstance(estimate, (int, float)) or not 0 <= estimate < float("inf"):
        raise ConfigError(f"token_estimate must be a number of tokens >= 0, got {estimate!r}")
    count("batch", options.batch)
    count("max_attempts", options.max_attempts)
    count("max_rate_limit_retries", options.max_rate_limit_retries, 0)
    if options.min_processes is not None:
        count("min_processes", options.min_processes)
    if options.max_processes is not None:
        count("max_processes", options.max_processes)
    if options.min_processes is not None and options.max_processes is not None:
        if options.min_processes > options.max_processes:
            raise ConfigError(
                f"min_processes ({options.min_processes}) must not exceed max_processes ({options.max_processes})"
            )
    lease = seconds("lease", options.lease)
    heartbeat = seconds("heartbeat", options.heartbeat)
    reap_after = seconds("reap_after", options.reap_after)
    seconds("grace", options.grace, zero_ok=True)
    if heartbeat >= lease:
        raise ConfigError(
            f"heartbeat ({heartbeat}s) must be shorter than lease ({lease}s), or leases expire between beats; "
            "a heartbeat of lease/3 or less is safe"
        )
    if heartbeat >= reap_after:
        raise ConfigError(
            f"heartbeat ({heartbeat}s) must be shorter than reap_after ({reap_after}s), or live workers get reaped"
        )
    if options.progress not in ("auto", "bar", "log", "none"):
        raise ConfigError(f"progress must be one of auto, bar, log, none; got {options.progress!r}")
    if options.start_method not in START_METHODS:
        raise ConfigError(f"start_method must be one of {', '.join(START_METHODS)}; got {options.start_method!r}")


def check_lock_provider(hive: Hive, options: FleetOptions) -> None:
    """``ConfigError`` unless the lock provider a handler's ``ctx.lock`` would use can be created.

    Every handler can call ``ctx.lock``: a bogus ``locks`` URL or a missing lock plugin must
    stop the run here, not poison every item that takes a lock.
    """
    try:
        hive.locks()
    except WorkhiveError as exc:
        if options.locks is None or options.locks == default_locks_url(options.storage, hive.manager):
            where = "the default lock provider for this storage"  # the user chose no locks
        else:
            where = f"--locks {redact_url(options.locks)!r}"
        raise ConfigError(
            f"{where} cannot be used, and handlers may take locks with ctx.lock: {exc} "
            "(pass --locks URL with an installed lock provider, see `workhive plugins`)"
        ) from exc


def run_fleet(
    options: FleetOptions,
    *,
    on_progress: Callable[[FleetProgress], None] | None = None,
    log_level: str | None = None,
) -> FleetReport:
    """Run a fleet of worker processes until the pool drains (``until_empty``) or a signal; blocking.

    Before anything starts, the options (including the upper bounds on
    processes and concurrency, lifted by ``allow_large_fleet``), the handler
    (imported here too, and called with one argument), the storage URL, the
    credential specs and the lock provider a handler's ``ctx.lock`` would use
    are checked: ``ConfigError`` (or ``PluginNotFound`` / ``StorageUnavailable``
    for the storage, ``CredentialError`` for keys) is raised and nothing runs. Once
    running, what happened is in the returned report, whose ``exit_code`` is
    an ``ExitCode``. ``on_progress`` receives a ``FleetProgress`` about once
    a second and a last one with ``final=True``; without it the built-in
    renderer for ``options.progress`` is used. Must be called from the main
    thread to handle SIGTERM/SIGINT (elsewhere signals are left alone).

    >>> report = run_fleet(FleetOptions(pool="jobs", handler="myjobs:handle", until_empty=True))  # doctest: +SKIP
    >>> report.exit_code, report.done
    (0, 200)
    """
    check_options(options)
    load_handler(options.handler)
    if on_progress is None:
        on_progress = renderer_for(options.progress)
    level = log_level or logging.getLevelName(logging.getLogger("workhive").getEffectiveLevel())
    return asyncio.run(_run(options, on_progress, level if isinstance(level, str) else "WARNING"))


async def _run(options: FleetOptions, on_progress: Callable[[FleetProgress], None] | None, level: str) -> FleetReport:
    with _metrics(options):
        hive = open_hive(options)
        await open_within_window(hive)  # a store out for a moment (a restart, a stalled network) is waited for
        try:
            credentials = build_credentials(options, hive)  # bad specs or no keys: fail here, before any process starts
            build_budgets(options, hive, credentials)  # budgets on a backend without them, an estimate that never fits
            check_lock_provider(hive, options)
            return await Supervisor(options, hive, on_progress, log_level=level).run()
        finally:
            await hive.close()


@contextlib.contextmanager
def _metrics(options: FleetOptions) -> Iterator[None]:
    """With ``metrics_port``: a shared directory every worker process counts into, served on the port.

    Set up before the hive opens and any process starts (prometheus-client picks its
    multiprocess mode when first imported); a port in use is a ConfigError before anything runs.
    """
    if options.metrics_port is None:
        yield
        return
    from workhive import metrics

    directory = metrics.enable(tempfile.mkdtemp(prefix="workhive-metrics-"))
    try:
        server = metrics.serve(options.metrics_port)
        try:
            yield
        finally:
            server.shutdown()
            server.server_close()
    finally:
        os.environ.pop(metrics.ENV, None)
        shutil.rmtree(directory, ignore_errors=True)
