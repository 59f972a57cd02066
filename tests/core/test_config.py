"""Configuration: flags > WORKHIVE_* environment > workhive.toml / [tool.workhive] > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from workhive.config import SETTINGS, load_config
from workhive.errors import ConfigError
from workhive.hive import DEFAULT_LOCKS, DEFAULT_STORAGE
from workhive.testing.environment import without_workhive_settings


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


class TestDefaults:
    def test_every_setting_has_a_default_and_says_so(self, tmp_path: Path) -> None:
        config = load_config(env={}, search_from=tmp_path)
        assert config["storage"] == DEFAULT_STORAGE
        assert config["locks"] == DEFAULT_LOCKS
        assert config["backoff"] == "full-jitter"
        assert (config["lease"], config["heartbeat"], config["max_attempts"], config["reap_after"]) == (
            60.0,
            10.0,
            5,
            60.0,
        )
        assert config["credentials"] == ()
        assert config["processes"] >= 1
        assert all(config.source(s.key) == "default" for s in SETTINGS)
        assert config.file is None

    # How the lock provider's default follows the storage: tests/core/test_default_locks.py.


class TestPrecedence:
    def test_flag_beats_env_beats_file_beats_default(self, tmp_path: Path) -> None:
        write(tmp_path / "workhive.toml", 'storage = "sqlite:///from-file.db"\nlease = 30\nbatch = 4\n')
        env = {"WORKHIVE_STORAGE": "sqlite:///from-env.db", "WORKHIVE_LEASE": "20"}
        config = load_config({"storage": "memory://"}, env=env, search_from=tmp_path)
        assert (config["storage"], config.source("storage")) == ("memory://", "flag --storage")
        assert (config["lease"], config.source("lease")) == (20.0, "env WORKHIVE_LEASE")
        assert (config["batch"], config.source("batch")) == (4, str(tmp_path / "workhive.toml"))
        assert (config["max_attempts"], config.source("max_attempts")) == (5, "default")

    def test_flags_given_as_none_or_empty_are_not_given(self, tmp_path: Path) -> None:
        config = load_config(
            {"storage": None, "credentials": ()}, env={"WORKHIVE_CREDENTIALS": "env:A,env:B"}, search_from=tmp_path
        )
        assert config.source("storage") == "default"
        assert config["credentials"] == ("env:A", "env:B")

    def test_empty_environment_variable_is_ignored(self, tmp_path: Path) -> None:
        config = load_config(env={"WORKHIVE_LEASE": "  "}, search_from=tmp_path)
        assert config.source("lease") == "default"

    def test_unrelated_workhive_variables_are_not_settings(self, tmp_path: Path) -> None:
        # WORKHIVE_DEMO_KEY_1, WORKHIVE_DISABLE_PLUGINS… share the prefix but are not configuration keys.
        config = load_config(env={"WORKHIVE_DEMO_KEY_1": "sk-x", "WORKHIVE_DISABLE_PLUGINS": "a"}, search_from=tmp_path)
        assert all(config.source(s.key) == "default" for s in SETTINGS)


class TestFiles:
    def test_found_in_a_parent_directory(self, tmp_path: Path) -> None:
        write(tmp_path / "workhive.toml", "concurrency = 8\n")
        deep = tmp_path / "a" / "b"
        deep.mkdir(parents=True)
        config = load_config(env={}, search_from=deep)
        assert config["concurrency"] == 8
        assert config.file == tmp_path / "workhive.toml"

    def test_pyproject_tool_table(self, tmp_path: Path) -> None:
        write(tmp_path / "pyproject.toml", '[project]\nname = "x"\n\n[tool.workhive]\nmax-attempts = 3\n')
        config = load_config(env={}, search_from=tmp_path)
        assert config["max_attempts"] == 3
        assert config.source("max_attempts") == f"{tmp_path / 'pyproject.toml'} [tool.workhive]"

    def test_pyproject_without_the_table_is_skipped_for_a_parent_file(self, tmp_path: Path) -> None:
        write(tmp_path / "workhive.toml", "batch = 2\n")
        child = tmp_path / "child"
        child.mkdir()
        write(child / "pyproject.toml", '[project]\nname = "x"\n')
        assert load_config(env={}, search_from=child)["batch"] == 2

    def test_workhive_toml_wins_over_pyproject_in_the_same_directory(self, tmp_path: Path) -> None:
        write(tmp_path / "workhive.toml", "batch = 2\n")
        write(tmp_path / "pyproject.toml", "[tool.workhive]\nbatch = 9\n")
        assert load_config(env={}, search_from=tmp_path)["batch"] == 2

    def test_explicit_file_through_the_environment(self, tmp_path: Path) -> None:
        path = write(tmp_path / "elsewhere.toml", 'backoff = "constant"\n')
        config = load_config(env={"WORKHIVE_CONFIG": str(path)}, search_from=None)
        assert config["backoff"] == "constant"

    def test_credentials_list_and_lone_string(self, tmp_path: Path) -> None:
        write(tmp_path / "workhive.toml", 'credentials = ["env:A", "env:B"]\n')
        assert load_config(env={}, search_from=tmp_path)["credentials"] == ("env:A", "env:B")
        write(tmp_path / "workhive.toml", 'credentials = "env:A"\n')
        assert load_config(env={}, search_from=tmp_path)["credentials"] == ("env:A",)


class TestBadInput:
    def test_unknown_key_names_the_file_the_key_and_a_suggestion(self, tmp_path: Path) -> None:
        write(tmp_path / "workhive.toml", "leese = 30\n")
        with pytest.raises(ConfigError) as info:
            load_config(env={}, search_from=tmp_path)
        message = str(info.value)
        assert str(tmp_path / "workhive.toml") in message
        assert "'leese'" in message and "did you mean 'lease'" in message

    def test_unknown_key_in_pyproject_names_the_table(self, tmp_path: Path) -> None:
        write(tmp_path / "pyproject.toml", "[tool.workhive]\nstorge = 'memory://'\n")
        with pytest.raises(ConfigError, match=r"pyproject\.toml \[tool\.workhive\].*'storge'"):
            load_config(env={}, search_from=tmp_path)

    @pytest.mark.parametrize(
        ("line", "key"),
        [
            ('lease = "long"', "lease"),
            ("lease = 0", "lease"),
            ("max_attempts = 2.5", "max_attempts"),
            ("max_attempts = true", "max_attempts"),
            ("processes = 0", "processes"),
            ("storage = 5", "storage"),
            ('progress = "fancy"', "progress"),
            ("credentials = [1, 2]", "credentials"),
        ],
    )
    def test_wrong_type_in_file_names_file_and_key(self, tmp_path: Path, line: str, key: str) -> None:
        write(tmp_path / "workhive.toml", line + "\n")
        with pytest.raises(ConfigError) as info:
            load_config(env={}, search_from=tmp_path)
        assert str(tmp_path / "workhive.toml") in str(info.value)
        assert key in str(info.value)
        assert info.value.key == key  # type: ignore[attr-defined]

    def test_wrong_type_in_environment_names_the_variable(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=r"WORKHIVE_MAX_ATTEMPTS.*integer.*'many'"):
            load_config(env={"WORKHIVE_MAX_ATTEMPTS": "many"}, search_from=tmp_path)

    def test_malformed_toml_names_the_file(self, tmp_path: Path) -> None:
        write(tmp_path / "workhive.toml", "lease = = 3\n")
        with pytest.raises(ConfigError, match=r"workhive\.toml: not valid TOML"):
            load_config(env={}, search_from=tmp_path)

    def test_missing_explicit_file(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="does not exist"):
            load_config(env={}, config_file=tmp_path / "nope.toml")

    def test_heartbeat_must_be_shorter_than_the_lease(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match=r"heartbeat \(30s, from flag --heartbeat\).*lease \(20s"):
            load_config({"heartbeat": 30.0, "lease": 20.0}, env={}, search_from=tmp_path)

    def test_min_processes_above_max(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="min_processes"):
            load_config({"min_processes": 4, "max_processes": 2}, env={}, search_from=tmp_path)

    def test_unknown_flag_setting(self) -> None:
        with pytest.raises(ConfigError, match="unknown setting 'colour'"):
            load_config({"colour": "red"}, env={}, search_from=None)


class TestFleetOptions:
    def test_settings_become_fleet_options(self, tmp_path: Path) -> None:
        write(tmp_path / "workhive.toml", 'handler = "mod:fn"\nconcurrency = 8\ncredentials = ["env:K"]\n')
        options = load_config(env={}, search_from=tmp_path).fleet_options("jobs", until_empty=True)
        assert (options.pool, options.handler, options.concurrency) == ("jobs", "mod:fn", 8)
        assert options.credentials == ("env:K",)
        assert options.until_empty is True

    def test_no_handler_anywhere_is_a_config_error(self, tmp_path: Path) -> None:
        with pytest.raises(ConfigError, match="--handler"):
            load_config(env={}, search_from=tmp_path).fleet_options("jobs")

    def test_to_json_has_value_and_source(self, tmp_path: Path) -> None:
        data = load_config({"lease": 12.0}, env={}, search_from=tmp_path).to_json()
        assert data["lease"] == {"value": 12.0, "source": "flag --lease"}
        assert set(data) == {s.key for s in SETTINGS}


class TestConfigCommandHidesPasswords:
    """``workhive config`` (text and --json) never shows any piece of a URL's password (issue 24)."""

    @pytest.fixture(autouse=True)
    def _empty_dir(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

        without_workhive_settings(monkeypatch, tmp_path)

    @staticmethod
    def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
        from workhive.cli import main

        try:
            code = main(list(argv))
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        out, err = capsys.readouterr()
        return int(code or 0), out + err

    @pytest.mark.parametrize("char", ["@", "?", "#", "/", ":"])
    @pytest.mark.parametrize("as_json", [False, True])
    def test_flag_env_and_file_urls(
        self, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, char: str, as_json: bool
    ) -> None:
        password = f"ssCANARY1{char}ssCANARY2{char}ssCANARY3"
        storage = f"redis://user:{password}@cache:6379/0?prefix=p"
        monkeypatch.setenv("WORKHIVE_LOCKS", f"postgresql://app:{password}@db:5432/jobs")
        code, out = self.run(capsys, "--storage", storage, "config", *(["--json"] if as_json else []))
        assert code == 0, out
        assert "CANARY" not in out, out
        assert "cache:6379/0?prefix=p" in out and "db:5432/jobs" in out  # the rest is still shown

    @pytest.mark.parametrize("char", ["@", "?", "#", "/", ":"])
    def test_a_url_in_the_config_file(self, capsys: pytest.CaptureFixture[str], tmp_path: Path, char: str) -> None:
        password = f"ssCANARY1{char}ssCANARY2{char}ssCANARY3"
        write(tmp_path / "workhive.toml", f'storage = "postgresql://app:{password}@db/jobs"\n')
        for argv in (["config"], ["config", "--json"]):
            code, out = self.run(capsys, *argv)
            assert code == 0 and "CANARY" not in out, out
