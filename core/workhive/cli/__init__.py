"""The ``workhive`` command line.

Each command lives in its own module under ``workhive.cli``; this module
holds the group, the shared options, and the error boundary that turns a
``WorkhiveError`` into a one-line message and a non-zero exit.
"""

from __future__ import annotations

import importlib
import sys
import warnings
from typing import Any

import click

from workhive.cli.cancel_cmd import cancel_cmd
from workhive.cli.config_cmd import config_cmd
from workhive.cli.context import CliContext, echo
from workhive.cli.dead_cmd import dead_cmd
from workhive.cli.demo_cmd import demo_cmd
from workhive.cli.group_cmd import group_cmd
from workhive.cli.plugins_cmd import plugins_cmd
from workhive.cli.purge_cmd import purge_cmd
from workhive.cli.push_cmd import push_cmd
from workhive.cli.reap_cmd import reap_cmd
from workhive.cli.requeue_cmd import requeue_cmd
from workhive.cli.schedule_cmd import schedule_cmd
from workhive.cli.show_cmd import show_cmd
from workhive.cli.status_cmd import status_cmd
from workhive.cli.work_cmd import work_cmd
from workhive.cli.workers_cmd import workers_cmd
from workhive.errors import WorkhiveError

__all__ = ["cli", "main"]


class _Group(click.Group):
    """The built-in commands, then those installed plugins add (the ``workhive_cli_commands`` hook)."""

    def _plugin_commands(self, ctx: click.Context) -> dict[str, click.Command]:
        found: dict[str, click.Command] | None = ctx.meta.get("workhive.plugin_commands")
        if found is None:
            # Resolved before the group's callback runs: build the manager it will reuse.
            manager = CliContext(no_plugins=bool(ctx.params.get("no_plugins"))).manager
            ctx.meta["workhive.manager"] = manager
            found = {}
            for name, command in manager.cli_commands().items():
                if name in self.commands:
                    echo(f"warning: a plugin's command {name!r} is ignored: it is built in", err=True)
                else:
                    found[name] = command
            ctx.meta["workhive.plugin_commands"] = found
        return found

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return self.commands.get(cmd_name) or self._plugin_commands(ctx).get(cmd_name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self._plugin_commands(ctx)})


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--storage",
    metavar="URL",
    default=None,
    help="Storage URL (else WORKHIVE_STORAGE, workhive.toml, or sqlite:///.workhive/hive.db).",
)
@click.option(
    "--config",
    "config_file",
    metavar="FILE",
    default=None,
    help="Read settings from this file (else WORKHIVE_CONFIG, or workhive.toml searched upward).",
)
@click.option("--no-plugins", is_flag=True, help="Load only workhive's built-ins, no installed plugins.")
@click.option("--debug", is_flag=True, help="Show tracebacks for errors.")
@click.version_option(package_name="workhive")
@click.pass_context
def cli(ctx: click.Context, storage: str | None, config_file: str | None, no_plugins: bool, debug: bool) -> None:
    """Run fleets of workers over shared work pools.

    \b
    Quick start:
      workhive demo                                   # the whole story against a local fake LLM API
      workhive push emails items.jsonl                # JSON lines, one item each
      workhive work emails --handler mymod:send --until-empty
      workhive status
    """
    ctx.obj = CliContext(
        no_plugins=no_plugins,
        debug=debug,
        storage=storage,
        config_file=config_file,
        manager=ctx.meta.get("workhive.manager"),
    )


for _command in (
    push_cmd,
    work_cmd,
    status_cmd,
    workers_cmd,
    dead_cmd,
    show_cmd,
    requeue_cmd,
    cancel_cmd,
    purge_cmd,
    reap_cmd,
    schedule_cmd,
    group_cmd,
    plugins_cmd,
    config_cmd,
    demo_cmd,
):
    cli.add_command(_command)

# `workhive locks` comes from the locks module when it is part of this install.
try:
    cli.add_command(importlib.import_module("workhive.cli.locks_cmd").locks_cmd)
except ModuleNotFoundError as _exc:  # pragma: no cover - only while the module is absent
    if _exc.name != "workhive.cli.locks_cmd":
        raise


def _debug_requested(argv: list[str]) -> bool:
    # Only the group's own options precede the command name; "--debug" after it belongs to the command.
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--debug":
            return True
        elif arg in ("--storage", "--config"):
            skip = True  # their value follows
        elif not arg.startswith("-"):
            return False
    return False


def main(argv: list[str] | None = None) -> Any:
    """Console-script entry point.

    Usage errors exit 2 with click's message; a ``WorkhiveError`` (bad config,
    unknown plugin or handler, unreachable storage, unknown pool…) prints
    ``error: <message>`` on stderr and exits 2, with a traceback only under
    ``--debug``. A command's own exit status (``workhive work``) is passed on.
    """
    args = list(argv if argv is not None else sys.argv[1:])
    debug = _debug_requested(args)
    with warnings.catch_warnings():
        warnings.simplefilter("default")
        try:
            rv = cli.main(args=args, prog_name="workhive", standalone_mode=False)
        except click.exceptions.Abort:
            echo("aborted", err=True)
            sys.exit(130)
        except click.ClickException as exc:
            exc.show()
            sys.exit(exc.exit_code)
        except WorkhiveError as exc:
            if debug:
                raise
            echo(f"error: {exc}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            echo("interrupted", err=True)
            sys.exit(130)
    # standalone_mode=False returns ctx.exit()'s code (an int) or the command's return value (None).
    if isinstance(rv, int) and rv != 0:
        sys.exit(rv)
    return 0
