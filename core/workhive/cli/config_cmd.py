"""``workhive config``: every effective setting and where it came from."""

from __future__ import annotations

from typing import Any

import click

from workhive.cli.context import CliContext, echo, emit_json, json_option, pass_cli, table
from workhive.config import SETTINGS
from workhive.urls import redact_url


def _show(value: Any) -> str:
    value = redact_url(value)
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return ",".join(value) or "-"
    return str(redact_url(value))


@click.command("config")
@json_option
@pass_cli
def config_cmd(cli: CliContext, as_json: bool) -> None:
    """Show each setting's effective value and its source.

    Precedence: flags > WORKHIVE_* environment > workhive.toml or [tool.workhive]
    in pyproject.toml (searched from here upward) > defaults.
    """
    config = cli.config
    if as_json:
        settings = config.to_json()
        # Storage and lock URLs may carry a password: never shown, here or anywhere.
        _redact_values(settings)
        emit_json({"file": None if config.file is None else str(config.file), "settings": settings})
        return
    rows: list[tuple[Any, ...]] = [("SETTING", "VALUE", "SOURCE")]
    rows.extend((s.key, _show(config[s.key]), config.source(s.key)) for s in SETTINGS)
    table(rows)
    echo(f"config file: {config.file or 'none found (workhive.toml or [tool.workhive] in pyproject.toml)'}")


def _redact_values(data: Any) -> None:
    """Replace URL passwords in every string value of a JSON-ready structure, in place."""
    items = data.items() if isinstance(data, dict) else enumerate(data) if isinstance(data, list) else ()
    for key, value in list(items):
        if isinstance(value, str):
            data[key] = redact_url(value)
        else:
            _redact_values(value)
