"""The CLI without plugins: help, config, and errors that are one line and no traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from workhive.cli import cli, main
from workhive.errors import ConfigError
from workhive.testing.environment import without_workhive_settings, workhive_free_env

COMMANDS = (
    "push",
    "work",
    "status",
    "workers",
    "dead",
    "show",
    "requeue",
    "purge",
    "reap",
    "plugins",
    "config",
    "demo",
)


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test runs in an empty directory with no WORKHIVE_* settings of the caller's."""
    return without_workhive_settings(monkeypatch, tmp_path)


def run_main(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the console-script entry point; returns (exit status, stdout, stderr)."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return int(code or 0), out, err


def assert_one_line_error(code: int, err: str, *fragments: str) -> None:
    assert code == 2
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    for fragment in fragments:
        assert fragment in lines[0]


class TestHelp:
    def test_group_help_lists_every_command(self) -> None:
        result = CliRunner().invoke(cli, ["--help"])
        assert result.exit_code == 0
        for command in COMMANDS:
            assert command in result.output

    @pytest.mark.parametrize("command", COMMANDS)
    def test_each_command_has_help_and_json(self, command: str) -> None:
        result = CliRunner().invoke(cli, [command, "--help"])
        assert result.exit_code == 0
        assert "--json" in result.output


class TestConfigCommand:
    def test_shows_values_and_sources(self, capsys: pytest.CaptureFixture[str], clean_env: Path) -> None:
        (clean_env / "workhive.toml").write_text("batch = 3\n")
        os.environ["WORKHIVE_LEASE"] = "45"
        code, out, _ = run_main(capsys, "--storage", "memory://", "config")
        assert code == 0
        lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
        assert "memory://" in lines["storage"] and "flag --storage" in lines["storage"]
        assert "45.0" in lines["lease"] and "env WORKHIVE_LEASE" in lines["lease"]
        assert "workhive.toml" in lines["batch"]
        assert "default" in lines["max_attempts"]

    def test_json(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, out, _ = run_main(capsys, "config", "--json")
        assert code == 0
        data = json.loads(out)
        assert data["file"] is None
        assert data["settings"]["storage"] == {"value": "sqlite:///.workhive/hive.db", "source": "default"}

    def test_bad_file_is_one_line_error(self, capsys: pytest.CaptureFixture[str], clean_env: Path) -> None:
        (clean_env / "workhive.toml").write_text("leese = 3\n")
        code, _, err = run_main(capsys, "config")
        assert_one_line_error(code, err, "workhive.toml", "'leese'")

    def test_debug_raises_with_traceback(self, clean_env: Path) -> None:
        (clean_env / "workhive.toml").write_text("leese = 3\n")
        with pytest.raises(ConfigError):
            main(["--debug", "config"])

    def test_debug_traceback_from_the_real_command(self, clean_env: Path) -> None:
        (clean_env / "workhive.toml").write_text("lease = 'x'\n")
        env = workhive_free_env()
        quiet = subprocess.run(
            [sys.executable, "-m", "workhive", "config"], capture_output=True, text=True, env=env, timeout=60
        )
        loud = subprocess.run(
            [sys.executable, "-m", "workhive", "--debug", "config"], capture_output=True, text=True, env=env, timeout=60
        )
        assert quiet.returncode == 2 and "Traceback" not in quiet.stderr and "lease" in quiet.stderr
        assert loud.returncode != 0 and "Traceback" in loud.stderr and "ConfigError" in loud.stderr


class TestErrors:
    def test_unknown_storage_plugin(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run_main(capsys, "--storage", "nosuch://x", "status")
        assert_one_line_error(code, err, "no storage plugin named 'nosuch'")

    def test_no_plugins_names_the_package_to_install(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run_main(capsys, "--no-plugins", "--storage", "memory://", "status")
        assert_one_line_error(code, err, "pip install workhive-memory")

    def test_storage_url_without_scheme(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run_main(capsys, "--storage", "hive.db", "status")
        assert_one_line_error(code, err, "has no scheme")

    def test_bad_setting_in_environment(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        monkeypatch.setenv("WORKHIVE_MAX_ATTEMPTS", "lots")  # undone after the test: later tests read the env
        code, _, err = run_main(capsys, "status")
        assert_one_line_error(code, err, "WORKHIVE_MAX_ATTEMPTS")

    def test_push_bad_line_reports_its_number_before_touching_storage(
        self, capsys: pytest.CaptureFixture[str], clean_env: Path
    ) -> None:
        (clean_env / "items.jsonl").write_text('{"a": 1}\n\n{"a": 2\n{"a": 3}\n')
        # --no-plugins: no storage could even be opened, so the check must come first.
        code, _, err = run_main(capsys, "--no-plugins", "push", "jobs", "items.jsonl")
        assert_one_line_error(code, err, "items.jsonl line 3", "nothing was pushed", "--skip-invalid")

    def test_push_nan_is_invalid(self, capsys: pytest.CaptureFixture[str], clean_env: Path) -> None:
        (clean_env / "items.jsonl").write_text('{"a": NaN}\n')
        code, _, err = run_main(capsys, "--no-plugins", "push", "jobs", "items.jsonl")
        assert_one_line_error(code, err, "line 1")

    def test_push_dedup_field_missing(self, capsys: pytest.CaptureFixture[str], clean_env: Path) -> None:
        (clean_env / "items.jsonl").write_text('{"id": "a"}\n{"other": 1}\n')
        code, _, err = run_main(capsys, "--no-plugins", "push", "jobs", "items.jsonl", "--dedup-key-field", "id")
        assert_one_line_error(code, err, "line 2", "--dedup-key-field 'id'")

    def test_requeue_needs_ids_or_all(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run_main(capsys, "requeue", "jobs")
        assert code == 2 and "--all" in err and "Traceback" not in err

    def test_work_without_handler(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run_main(capsys, "work", "jobs")
        assert_one_line_error(code, err, "--handler")

    def test_work_unknown_handler_module(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run_main(capsys, "work", "jobs", "--handler", "no_such_module_xyz:run")
        assert_one_line_error(code, err, "no_such_module_xyz")

    def test_work_unknown_handler_function(self, capsys: pytest.CaptureFixture[str], clean_env: Path) -> None:
        (clean_env / "my_tasks_mod.py").write_text("def run(ctx):\n    return None\n")
        code, _, err = run_main(capsys, "work", "jobs", "--handler", "my_tasks_mod:nope")
        assert_one_line_error(code, err, "'nope'", "run")
        sys.modules.pop("my_tasks_mod", None)

    def test_work_bad_option_value(self, capsys: pytest.CaptureFixture[str]) -> None:
        code, _, err = run_main(capsys, "work", "jobs", "--handler", "json:dumps", "--lease", "5", "--heartbeat", "9")
        assert_one_line_error(code, err, "heartbeat", "lease")


class TestRuntimeFlags:
    def test_a_huge_fleet_is_refused_naming_the_limit(self, capsys, tmp_path) -> None:
        code, _, err = run_main(capsys, "work", "jobs", "--handler", "json:loads", "--concurrency", "1000000")
        assert_one_line_error(code, err, "concurrency 1000000 is over the limit of 20000", "--allow-large-fleet")
        assert list(tmp_path.iterdir()) == []  # refused before anything was opened

    def test_reap_below_the_heartbeat_is_refused_unless_forced(self, capsys, tmp_path) -> None:
        code, _, err = run_main(capsys, "reap", "--threshold", "1")
        assert code == 2 and "heartbeat interval (10s" in err and "--force" in err
        assert list(tmp_path.iterdir()) == []

    def test_purge_durations(self) -> None:
        from workhive.cli.purge_cmd import parse_duration

        assert [parse_duration(t) for t in ("90", "90s", "30m", "12h", "7d", "2w", "1.5h")] == [
            90.0,
            90.0,
            1800.0,
            43200.0,
            604800.0,
            1209600.0,
            5400.0,
        ]
        for bad in ("soon", "-1d", "7 days", ""):
            with pytest.raises(ValueError, match="not a duration"):
                parse_duration(bad)

    def test_grace_zero_is_a_valid_setting(self) -> None:
        from workhive.config import load_config

        assert load_config({"grace": 0.0}, env={}, search_from=None)["grace"] == 0.0
        with pytest.raises(ConfigError, match=">= 0"):
            load_config({"grace": -1.0}, env={}, search_from=None)
