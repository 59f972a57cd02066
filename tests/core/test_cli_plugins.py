"""`workhive plugins` with the core alone."""

from __future__ import annotations

import json

from click.testing import CliRunner

from workhive.cli import cli


def test_plugins_json_lists_builtins() -> None:
    result = CliRunner().invoke(cli, ["--no-plugins", "plugins", "--json"])
    assert result.exit_code == 0, result.output
    plugins = {p["name"]: p for p in json.loads(result.output)}
    assert plugins["builtin-backoff"]["status"] == "active"
    assert plugins["builtin-backoff"]["builtin"] is True
    assert "full-jitter" in plugins["builtin-backoff"]["provides"]["backoff"]


def test_plugins_table_has_a_header_and_a_row_per_plugin() -> None:
    result = CliRunner().invoke(cli, ["--no-plugins", "plugins"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].split()[:4] == ["NAME", "DISTRIBUTION", "VERSION", "STATUS"]
    assert any(line.startswith("builtin-backoff") for line in lines[1:])
