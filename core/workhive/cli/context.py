"""State shared by CLI commands: options from the group, the plugin manager."""

from __future__ import annotations

import json
import warnings
from typing import Any

import attrs
import click

from workhive.plugin_manager import PluginManager

__all__ = ["CliContext", "pass_cli", "emit_json"]


@attrs.define
class CliContext:
    no_plugins: bool = False
    debug: bool = False
    _manager: PluginManager | None = None

    @property
    def manager(self) -> PluginManager:
        """Plugins loaded once; a broken plugin is a warning on stderr, not a crash."""
        if self._manager is None:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                self._manager = PluginManager(entry_points=not self.no_plugins, on_error="warn")
            for w in caught:
                click.echo(f"warning: {w.message}", err=True)
        return self._manager


pass_cli = click.make_pass_decorator(CliContext)


def emit_json(data: Any) -> None:
    """Print ``data`` as JSON for scripts (one document, trailing newline)."""
    click.echo(json.dumps(data, indent=2, sort_keys=True, default=str))
