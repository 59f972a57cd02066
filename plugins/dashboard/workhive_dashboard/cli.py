"""``workhive dashboard``: serve the live dashboard for the configured hive."""

from __future__ import annotations

from typing import Any

import click

from workhive.errors import StorageUnavailable
from workhive.redaction import scrub
from workhive.urls import redact_url
from workhive_dashboard.settings import DEFAULT_PORT, DashboardSettings

__all__ = ["dashboard_cmd"]


@click.command("dashboard")
@click.option(
    "--host", default="127.0.0.1", show_default=True, help="Address to bind; off loopback a token is required."
)
@click.option(
    "--port", type=click.IntRange(0, 65535), default=DEFAULT_PORT, show_default=True, help="Port (0: any free)."
)
@click.option(
    "--token",
    envvar="WORKHIVE_DASHBOARD_TOKEN",
    default=None,
    help="Token every request must carry (else WORKHIVE_DASHBOARD_TOKEN; made up when bound off loopback).",
)
@click.option(
    "--refresh", type=click.FloatRange(0.2, 3600), default=2.0, show_default=True, help="Seconds between updates."
)
@click.pass_obj
def dashboard_cmd(cli: Any, host: str, port: int, token: str | None, refresh: float) -> None:
    """Serve a live dashboard of pools, workers, credentials and dead items, with requeue and purge.

    The hive must exist (like `workhive status`, it is never created here).

    \b
    Example:
      workhive dashboard                       # http://127.0.0.1:8177/
      workhive dashboard --host 0.0.0.0        # prints a URL with a fresh token
    """
    from workhive_dashboard.serve import bind, serve

    config = cli.config
    settings = DashboardSettings(
        storage=config["storage"], locks=config["locks"], host=host, port=port, token=token, refresh=refresh
    )
    made_up = settings.token is None
    settings = settings.with_token()
    _check_the_hive_exists(cli)
    sock = bind(settings.host, settings.port)
    bound_host, bound_port = sock.getsockname()[:2]
    shown = f"[{bound_host}]" if ":" in bound_host else bound_host
    url = f"http://{shown}:{bound_port}/"
    click.echo(f"workhive dashboard for {redact_url(settings.storage)}")
    if settings.token is not None and made_up:
        # The token was made up here, so printing it once is the only way to hand it over.
        click.echo(f"  open {url}?token={settings.token}   (bound off loopback: every request needs this token)")
    elif settings.token is not None:
        click.echo(f"  open {url}?token=<your token>")
    else:
        click.echo(f"  open {url}")
    click.echo("  Ctrl-C stops it.")
    serve(settings, sock, manager=cli.manager)


def _check_the_hive_exists(cli: Any) -> None:
    """Open the hive with ``create=False`` once before serving: no hive there is ``HiveNotFound``
    (the CLI's one-line error, exit 2), and nothing is created.

    Storage that does not answer yet is only a warning: the page shows why and recovers by itself
    once it answers.
    """

    async def probe() -> None:
        async with cli.hive(create=False) as hive:
            await hive.now()  # opening found it; one read shows it answers too

    try:
        cli.run(probe)
    except StorageUnavailable as exc:
        click.echo(f"warning: {scrub(str(exc))}; serving anyway, the page shows this until storage answers", err=True)
