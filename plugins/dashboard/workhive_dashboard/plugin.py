"""The ``dashboard`` plugin: adds ``workhive dashboard`` to the CLI.

Importing it is cheap; the web stack (Starlette, uvicorn) loads only when the
command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workhive.hookspecs import hookimpl

if TYPE_CHECKING:
    import click

__all__ = ["workhive_cli_commands"]


@hookimpl
def workhive_cli_commands() -> click.Command:
    from workhive_dashboard.cli import dashboard_cmd

    return dashboard_cmd
