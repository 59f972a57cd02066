"""The ``workhive_cli_commands`` hook: plugins add CLI commands, validated like other descriptors."""

from __future__ import annotations

import types

import click
import pytest

from workhive import PluginConflict, PluginManager, PluginValidationError, hookimpl


def _plugin(*commands: object) -> object:
    @hookimpl
    def workhive_cli_commands() -> list[object]:
        return list(commands)

    return types.SimpleNamespace(workhive_cli_commands=workhive_cli_commands)


@click.command("hello")
def hello() -> None:
    click.echo("hi")


def test_commands_are_collected_by_name() -> None:
    manager = PluginManager(entry_points=False, extra=[("greeter", _plugin(hello))])
    assert manager.cli_commands() == {"hello": hello}


def test_no_plugin_no_commands() -> None:
    assert PluginManager(entry_points=False).cli_commands() == {}


def test_something_else_than_a_command_is_refused_naming_the_plugin() -> None:
    manager = PluginManager(entry_points=False, extra=[("sloppy", _plugin("hello"))])
    with pytest.raises(PluginValidationError, match=r"'sloppy'.*expected click\.Command instances"):
        manager.cli_commands()


def test_two_plugins_adding_one_name_conflict() -> None:
    manager = PluginManager(entry_points=False, extra=[("one", _plugin(hello)), ("two", _plugin(hello))])
    with pytest.raises(PluginConflict, match="two plugins add the command 'hello'"):
        manager.cli_commands()
