"""``workhive work POOL --handler module:function``: run a fleet of workers over POOL."""

from __future__ import annotations

import logging
import sys
from typing import Any

import attrs
import click

from workhive.cli.context import CliContext, echo, emit_json, format_age, json_option, pass_cli
from workhive.config import PROGRESS_MODES
from workhive.defaults import START_METHODS
from workhive.errors import PoolNotFound, StorageError
from workhive.redaction import install_log_scrubbing, scrub_data
from workhive.terminal import log_to_stderr


def report_json(report: Any) -> dict[str, Any]:
    """A ``FleetReport`` as plain data, secrets scrubbed."""
    return scrub_data(attrs.asdict(report))  # type: ignore[no-any-return]


def print_report(report: Any) -> None:
    """The human summary of a fleet run (secrets scrubbed and control characters escaped on every line)."""
    echo(
        f"{report.pool}: {report.done} done, {report.failed} failed (retried), {report.poisoned} poisoned, "
        f"{report.released} released, in {format_age(report.elapsed)}"
    )
    if getattr(report, "cancelled", 0):
        echo(f"cancelled while running: {report.cancelled} (Pool.cancel / workhive cancel)")
    if report.rate_limited:
        per_key = ", ".join(f"{name} {count}" for name, count in sorted(report.rate_limited.items()))
        echo(f"rate limited (429s): {per_key}")
    for name, reason in sorted(report.disabled_credentials.items()):
        echo(f"credential disabled: {name} ({reason})")
    lost = f", {report.workers_lost} lost" if report.workers_lost else ""
    if report.processes_replaced:
        lost += f"; {report.processes_replaced} worker process(es) died and were replaced (see the log above)"
    echo(f"workers: {report.workers_started} started{lost}")
    echo(f"exit {report.exit_code}: {report.reason}")


LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


def _log_level(verbose: int, log_level: str | None) -> str:
    if log_level is not None:
        return log_level.upper()
    return ("WARNING", "INFO", "DEBUG")[min(verbose, 2)]


def _configure_logging(level: str) -> None:
    # The supervisor logs here; worker processes get the same level and format (--log-level is
    # passed on), so a handler's ctx.logger lines show up beside the fleet's own.
    # Log lines quote handler errors: control characters in them are escaped (workhive.terminal).
    log_to_stderr(level)
    logging.getLogger("workhive").setLevel(level)
    install_log_scrubbing()


def _cwd_importable() -> None:
    # `workhive work --handler mymodule:fn` should find mymodule.py in the current
    # directory, as `python -m` would; the console script does not put it on sys.path.
    if "" not in sys.path:
        sys.path.insert(0, "")


@click.command("work")
@click.argument("pool")
@click.option("--handler", metavar="MODULE:FUNCTION", default=None, help="The function called for each item.")
@click.option(
    "--processes",
    metavar="N|auto|auto:MIN-MAX",
    default=None,
    help="Worker processes [CPU count]; auto scales them with the backlog and the keys' budgets "
    "(auto: 1 to the CPU count).",
)
@click.option("--min-processes", type=click.IntRange(min=1), default=None, help="Scale down to this many.")
@click.option("--max-processes", type=click.IntRange(min=1), default=None, help="Scale up to this many.")
@click.option(
    "--concurrency",
    type=click.IntRange(min=1),
    default=None,
    help="Items in flight per process [1], up to 20000: one worker holds them all (one registry row, "
    "one heartbeat a beat), so set it to what waiting work needs (an LLM call waits seconds).",
)
@click.option("--batch", type=click.IntRange(min=1), default=None, help="Items claimed per claim call [1].")
@click.option("--lease", type=float, default=None, help="Seconds a claim lasts between heartbeats [60].")
@click.option("--heartbeat", type=float, default=None, help="Seconds between heartbeats [10].")
@click.option(
    "--max-attempts",
    type=click.IntRange(min=1),
    default=None,
    help="Poison what this fleet claims after N attempts, whatever it was pushed with [5].",
)
@click.option("--reap-after", type=float, default=None, help="Silence before a worker is lost [60].")
@click.option("--until-empty", is_flag=True, help="Exit when the pool has drained.")
@click.option("--grace", type=float, default=None, help="Seconds in-flight items get after SIGTERM [30].")
@click.option(
    "--credentials", "credentials", multiple=True, metavar="SPEC", help="Credential provider, e.g. env:API_KEY."
)
@click.option("--backoff", metavar="SPEC", default=None, help="Backoff strategy, e.g. full-jitter?cap=60.")
@click.option(
    "--locks",
    metavar="URL",
    default=None,
    help="Lock provider URL [the storage's own locks on PostgreSQL, Redis, memory; else fcntl:///.workhive/locks].",
)
@click.option("--progress", type=click.Choice(PROGRESS_MODES), default=None, help="Progress display [auto].")
@click.option(
    "--metrics-port",
    type=click.IntRange(1, 65535),
    default=None,
    help="Serve Prometheus metrics for the whole fleet on this port of 127.0.0.1 (needs workhive[metrics]).",
)
@click.option(
    "--token-estimate",
    type=click.FloatRange(min=0),
    default=None,
    help="Tokens a call takes from its key's tpm/tpd budget when the handler has no estimate_tokens [0].",
)
@click.option(
    "--budget-wait",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Longest a worker waits for a key's rate budget before a call, in seconds [30].",
)
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds a handler may run on one item: then an async handler is cancelled, a sync one sees "
    "ctx.cancelled and gets --grace before its process is replaced; the item fails 'timed out' [no limit].",
)
@click.option(
    "--learn-limits",
    is_flag=True,
    help="Learn the request rate of keys given without rpm (slows down on 429s, speeds up while calls succeed).",
)
@click.option(
    "--start-method",
    type=click.Choice(START_METHODS),
    default=None,
    help="How worker processes start: fork them from this process once it has imported everything (auto: where "
    "that is safe, on Linux with one thread) or spawn a fresh interpreter each [auto].",
)
@click.option(
    "--allow-large-fleet",
    is_flag=True,
    help="Lift the upper bounds on --processes and --concurrency (the error says which you hit).",
)
@click.option(
    "-v",
    "--verbose",
    count=True,
    help="More log output, from the supervisor and every worker process (-v: INFO, -vv: DEBUG).",
)
@click.option(
    "--log-level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default=None,
    help="Log level of the supervisor, the workers and the handler's ctx.logger [WARNING].",
)
@json_option
@pass_cli
def work_cmd(
    cli: CliContext,
    pool: str,
    handler: str | None,
    until_empty: bool,
    allow_large_fleet: bool,
    token_estimate: float | None,
    budget_wait: float | None,
    timeout: float | None,
    learn_limits: bool,
    start_method: str | None,
    verbose: int,
    log_level: str | None,
    as_json: bool,
    **settings: Any,
) -> None:
    """Run worker processes that claim items from POOL and call the handler on each.

    The handler takes one argument, the item's context (ctx.data, ctx.attempt,
    ctx.credential, ctx.lock(name), ctx.logger), and returns a JSON result or None.
    Raise workhive.RateLimited / AuthFailed / Permanent to steer retries.

    Exit status: 0 when drained (--until-empty) or stopped cleanly by SIGTERM,
    1 when workers could not run or storage failed (unreachable, even at start, or
    kept failing), 2 for bad configuration (checked before anything runs: options,
    handler signature, storage URL and plugin, credentials, lock provider;
    --until-empty on a pool that never had an item), 130 after a
    second signal (claims are put back without spending attempts). A signal sent
    to the whole process group (Ctrl-C, `timeout`) is one request to stop; the
    same signal again within a second is taken as that request delivered twice.

    -v / --log-level reach every worker process: a failing item's error, and the
    handler's own ctx.logger lines, show on stderr.

    \b
    Example:
      workhive work summaries --handler mypkg.tasks:summarise \\
          --processes 2 --concurrency 8 --credentials env:OPENAI_API_KEY --until-empty
    """
    from workhive.runtime.fleet import check_options
    from workhive.runtime.handler import load_handler  # the runtime is only loaded when a fleet runs

    _auto_processes(settings)
    config = cli.load_config(handler=handler, **settings)
    budget_options: dict[str, Any] = {"learn_limits": learn_limits}
    if token_estimate is not None:
        budget_options["token_estimate"] = token_estimate
    if budget_wait is not None:
        budget_options["budget_wait"] = budget_wait
    if timeout is not None:
        budget_options["timeout"] = timeout
    if start_method is not None:
        budget_options["start_method"] = start_method
    options = config.fleet_options(
        pool, until_empty=until_empty, no_plugins=cli.no_plugins, allow_large_fleet=allow_large_fleet, **budget_options
    )
    level = _log_level(verbose, log_level)
    _configure_logging(level)
    _cwd_importable()
    check_options(options)  # bounds and timings: one line, before anything opens or forks
    load_handler(options.handler)  # fail here, in one line, rather than in every worker process

    async def reachable() -> list[str]:
        # Unknown plugin or storage that stays unreachable: one clear error, before forking.
        async with cli.hive(config, patient=True) as hive:
            hive.pool(pool)  # a bad pool name is InvalidName here
            return await hive.pools()

    try:
        known = cli.run(reachable)
    except StorageError as exc:
        _storage_failed(exc)
    if pool not in known:
        listing = ", ".join(sorted(known)) or "none yet"
        if until_empty:
            raise PoolNotFound(
                f"pool {pool!r} has never had an item, so there is nothing to drain (known pools: {listing}); "
                "push work first, or drop --until-empty to wait for it",
                pool=pool,
                known=known,
            )
        echo(
            f"warning: pool {pool!r} has no items yet (known pools: {listing}); the workers wait for work pushed to it",
            err=True,
        )

    from workhive.runtime import run_fleet
    from workhive.runtime.progress import renderer_for

    # Progress goes to stderr, so stdout holds only the report (and --json stays one document).
    try:
        report = run_fleet(options, on_progress=renderer_for(options.progress, sys.stderr), log_level=level)
    except StorageError as exc:  # the store went away between the check above and the fleet's own opening
        _storage_failed(exc)
    if as_json:
        emit_json(report_json(report))
    else:
        print_report(report)
    click.get_current_context().exit(report.exit_code)


def _auto_processes(settings: dict[str, Any]) -> None:
    """``--processes N`` as a count; ``auto``/``auto:MIN-MAX`` as min and max processes (autoscaling)."""
    from workhive.autoscale import parse_processes

    value = settings.get("processes")
    if value is None:
        return
    low, high = parse_processes(value)
    if high is None:
        settings["processes"] = low
        return
    if settings.get("min_processes") is not None or settings.get("max_processes") is not None:
        raise click.UsageError("--processes auto sets the range itself: drop --min-processes/--max-processes")
    settings.update(processes=low, min_processes=low, max_processes=high)


def _storage_failed(exc: StorageError) -> None:
    """A store that cannot be reached is the run failing (exit 1, retry later), not a command to fix (2)."""
    from workhive.runtime.options import ExitCode

    echo(f"error: {exc}", err=True)
    click.get_current_context().exit(ExitCode.FAILURE)
