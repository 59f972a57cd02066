"""``run_fleet``: the public entry point of the fleet runtime (``workhive work``)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from workhive.errors import ConfigError
from workhive.runtime.handler import load_handler
from workhive.runtime.options import FleetOptions, FleetReport
from workhive.runtime.process import _open_hive, build_credentials
from workhive.runtime.progress import FleetProgress, renderer_for
from workhive.runtime.supervisor import Supervisor
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


def run_fleet(
    options: FleetOptions,
    *,
    on_progress: Callable[[FleetProgress], None] | None = None,
    log_level: str | None = None,
) -> FleetReport:
    """Run a fleet of worker processes until the pool drains (``until_empty``) or a signal; blocking.

    Before anything starts, the options, the handler (imported here too) and
    the storage URL are checked: ``ConfigError`` (or ``PluginNotFound`` /
    ``StorageUnavailable`` for the storage) is raised and nothing runs. Once
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
    hive = _open_hive(options)
    await hive.open()
    try:
        build_credentials(options, hive)  # bad specs or no keys: fail here, before any process starts
        return await Supervisor(options, hive, on_progress, log_level=level).run()
    finally:
        await hive.close()
