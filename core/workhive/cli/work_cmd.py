"""``workhive work POOL --handler module:function``: run a fleet of workers over POOL."""

from __future__ import annotations

import sys
from typing import Any

import attrs
import click

from workhive.cli.context import CliContext, emit_json, format_age, json_option, pass_cli
from workhive.config import PROGRESS_MODES


def report_json(report: Any) -> dict[str, Any]:
    """A ``FleetReport`` as plain data."""
    return attrs.asdict(report)


def print_report(report: Any) -> None:
    """The human summary of a fleet run."""
    click.echo(
        f"{report.pool}: {report.done} done, {report.failed} failed (retried), {report.poisoned} poisoned, "
        f"{report.released} released, in {format_age(report.elapsed)}"
    )
    if report.rate_limited:
        per_key = ", ".join(f"{name} {count}" for name, count in sorted(report.rate_limited.items()))
        click.echo(f"rate limited (429s): {per_key}")
    for name, reason in sorted(report.disabled_credentials.items()):
        click.echo(f"credential disabled: {name} ({reason})")
    lost = f", {report.workers_lost} lost" if report.workers_lost else ""
    click.echo(f"workers: {report.workers_started} started{lost}")
    click.echo(f"exit {report.exit_code}: {report.reason}")


def _cwd_importable() -> None:
    # `workhive work --handler mymodule:fn` should find mymodule.py in the current
    # directory, as `python -m` would; the console script does not put it on sys.path.
    if "" not in sys.path:
        sys.path.insert(0, "")


@click.command("work")
@click.argument("pool")
@click.option("--handler", metavar="MODULE:FUNCTION", default=None, help="The function called for each item.")
@click.option("--processes", type=click.IntRange(min=1), default=None, help="Worker processes [CPU count].")
@click.option("--min-processes", type=click.IntRange(min=1), default=None, help="Scale down to this many.")
@click.option("--max-processes", type=click.IntRange(min=1), default=None, help="Scale up to this many.")
@click.option("--concurrency", type=click.IntRange(min=1), default=None, help="Async workers per process [1].")
@click.option("--batch", type=click.IntRange(min=1), default=None, help="Items claimed per claim call [1].")
@click.option("--lease", type=float, default=None, help="Seconds a claim lasts between heartbeats [60].")
@click.option("--heartbeat", type=float, default=None, help="Seconds between heartbeats [10].")
@click.option("--max-attempts", type=click.IntRange(min=1), default=None, help="Claims before poisoning [5].")
@click.option("--reap-after", type=float, default=None, help="Silence before a worker is lost [60].")
@click.option("--until-empty", is_flag=True, help="Exit when the pool has drained.")
@click.option("--grace", type=float, default=None, help="Seconds in-flight items get after SIGTERM [30].")
@click.option(
    "--credentials", "credentials", multiple=True, metavar="SPEC", help="Credential provider, e.g. env:API_KEY."
)
@click.option("--backoff", metavar="SPEC", default=None, help="Backoff strategy, e.g. full-jitter?cap=60.")
@click.option("--locks", metavar="URL", default=None, help="Lock provider URL.")
@click.option("--progress", type=click.Choice(PROGRESS_MODES), default=None, help="Progress display [auto].")
@json_option
@pass_cli
def work_cmd(
    cli: CliContext,
    pool: str,
    handler: str | None,
    until_empty: bool,
    as_json: bool,
    **settings: Any,
) -> None:
    """Run worker processes that claim items from POOL and call the handler on each.

    The handler takes one argument, the item's context (ctx.data, ctx.attempt,
    ctx.credential, ctx.lock(name), ctx.logger), and returns a JSON result or None.
    Raise workhive.RateLimited / AuthFailed / Permanent to steer retries.

    Exit status: 0 when drained (--until-empty) or stopped cleanly by SIGTERM,
    1 when workers could not run, 2 for bad configuration, 130 after a second signal.

    \b
    Example:
      workhive work summaries --handler mypkg.tasks:summarise \\
          --processes 2 --concurrency 8 --credentials env:OPENAI_API_KEY --until-empty
    """
    from workhive.runtime.handler import load_handler  # the runtime is only loaded when a fleet runs

    config = cli.load_config(handler=handler, **settings)
    options = config.fleet_options(pool, until_empty=until_empty, no_plugins=cli.no_plugins)
    _cwd_importable()
    load_handler(options.handler)  # fail here, in one line, rather than in every worker process

    async def reachable() -> None:
        async with cli.hive(config):  # unknown plugin or unreachable storage: one clear error, before forking
            pass

    cli.run(reachable)

    from workhive.runtime import run_fleet
    from workhive.runtime.progress import renderer_for

    # Progress goes to stderr, so stdout holds only the report (and --json stays one document).
    report = run_fleet(options, on_progress=renderer_for(options.progress, sys.stderr))
    if as_json:
        emit_json(report_json(report))
    else:
        print_report(report)
    click.get_current_context().exit(report.exit_code)
