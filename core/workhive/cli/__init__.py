"""The ``workhive`` command line.

Each command lives in its own module under ``workhive.cli``; this module
holds the group, the shared options, and the error boundary that turns a
``WorkhiveError`` into a one-line message and a non-zero exit.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import click

from workhive.cli.context import CliContext
from workhive.cli.plugins_cmd import plugins_cmd
from workhive.errors import WorkhiveError

__all__ = ["cli", "main"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--no-plugins", is_flag=True, help="Load only workhive's built-ins, no installed plugins.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="workhive")
@click.pass_context
def cli(ctx: click.Context, no_plugins: bool, debug: bool) -> None:
    """Run fleets of workers over shared work pools."""
    ctx.obj = CliContext(no_plugins=no_plugins, debug=debug)


cli.add_command(plugins_cmd)


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point: errors become a message and exit status 2 (1 for failures)."""
    debug = "--debug" in (argv if argv is not None else sys.argv[1:])
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        try:
            return cli.main(args=argv, prog_name="workhive", standalone_mode=False)
        except click.exceptions.Abort:
            click.echo("aborted", err=True)
            sys.exit(130)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except WorkhiveError as exc:
            if debug:
                raise
            click.echo(f"error: {exc}", err=True)
            sys.exit(2)
