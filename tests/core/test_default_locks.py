"""The default lock provider follows the storage: one rule (``workhive.defaults``) for the facade and the config.

An installed locks plugin that claims the storage URL's scheme is the default,
given the storage URL unchanged; any other storage gets ``fcntl:///.workhive/locks``.
These tests run with the core alone: the engines are fakes registered in code
(or as a distribution on ``sys.path``, for the CLI).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from click.testing import CliRunner

import workhive
from workhive.cli import cli
from workhive.config import load_config
from workhive.defaults import DEFAULT_LOCKS, default_locks_url
from workhive.errors import ConfigError, PluginNotFound
from workhive.hive import Hive
from workhive.plugin_manager import PluginManager
from workhive.runtime.fleet import check_lock_provider
from workhive.runtime.options import FleetOptions
from workhive.storage import REQUIRED_METHODS

ENGINE_URL = "vault://app:s3cret@db.example:7000/jobs?ns=billing&pool_size=3&retry_for=5"


def _backend() -> Any:
    async def method(self: Any, *args: Any) -> None:
        return None

    return type("VaultStorage", (), {"capabilities": frozenset(), **{name: method for name in REQUIRED_METHODS}})()


class _Locks:
    """A lock provider that remembers the URL it was built with."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def close(self) -> None:
        return None


class _Engine:
    """Storage and locks for ``vault://`` / ``vaults://``, like the PostgreSQL and Redis plugins."""

    @workhive.hookimpl
    def workhive_storage(self) -> workhive.StoragePlugin:
        return workhive.StoragePlugin(name="vault", factory=lambda url, **kw: _backend(), schemes=("vault", "vaults"))

    @workhive.hookimpl
    def workhive_locks(self) -> workhive.LocksPlugin:
        return workhive.LocksPlugin(name="vault", factory=_Locks, schemes=("vault", "vaults"))


class _StorageOnly:
    """Storage for ``plain://`` and no locks: its hives default to fcntl."""

    @workhive.hookimpl
    def workhive_storage(self) -> workhive.StoragePlugin:
        return workhive.StoragePlugin(name="plain", factory=lambda url, **kw: _backend())


class _Fcntl:
    """Stands in for workhive-fcntl-locks, which the core-alone environment does not have."""

    @workhive.hookimpl
    def workhive_locks(self) -> workhive.LocksPlugin:
        return workhive.LocksPlugin(name="fcntl", factory=_Locks)


def manager(*plugins: tuple[str, object]) -> PluginManager:
    return PluginManager(entry_points=False, extra=plugins)


ENGINE = ("vault-plugin", _Engine())
STORAGE_ONLY = ("plain-plugin", _StorageOnly())
FCNTL = ("fcntl-locks", _Fcntl())


@pytest.mark.parametrize("url", [ENGINE_URL, "vaults://db.example/jobs?ns=other", "VAULT://db.example/jobs"])
def test_a_storage_whose_plugin_provides_locks_takes_them_with_the_storage_url(url: str) -> None:
    hive = workhive.open(url, manager=manager(ENGINE))
    provider = hive.locks()
    assert isinstance(provider, _Locks)
    assert provider.url == url  # unchanged: every option, so the locks share the storage's namespace


def test_only_the_engine_installed_is_enough_for_locks() -> None:
    # What issue 26 met: PostgreSQL or Redis alone, no workhive-fcntl-locks, failed at start.
    hive = workhive.open(ENGINE_URL, manager=manager(ENGINE))
    assert hive.locks().url == ENGINE_URL  # type: ignore[attr-defined]


def test_a_storage_without_locks_of_its_own_defaults_to_fcntl() -> None:
    hive = workhive.open("plain://somewhere", manager=manager(STORAGE_ONLY, FCNTL))
    assert hive.locks().url == DEFAULT_LOCKS  # type: ignore[attr-defined]
    # ...and without fcntl installed, the error names the package to install.
    hive = workhive.open("plain://somewhere", manager=manager(STORAGE_ONLY))
    with pytest.raises(PluginNotFound, match="workhive-fcntl-locks"):
        hive.locks()


def test_a_locks_url_given_wins_over_the_default() -> None:
    hive = workhive.open(ENGINE_URL, locks="fcntl:///elsewhere", manager=manager(ENGINE, FCNTL))
    assert hive.locks().url == "fcntl:///elsewhere"  # type: ignore[attr-defined]


def test_a_backend_built_by_hand_has_no_url_and_defaults_to_fcntl() -> None:
    hive = Hive(_backend(), manager=manager(ENGINE, FCNTL))
    assert hive.locks().url == DEFAULT_LOCKS  # type: ignore[attr-defined]


@pytest.mark.parametrize("url", ["no-scheme-here.db", "1bad://x", "vault"])
def test_a_storage_url_without_a_usable_scheme_is_left_to_the_storage_to_report(url: str) -> None:
    assert default_locks_url(url, manager(ENGINE)) == DEFAULT_LOCKS
    config = load_config({"storage": url}, env={}, search_from=None, manager=manager(ENGINE))
    assert config["locks"] == DEFAULT_LOCKS


@pytest.mark.parametrize(
    ("storage", "plugins"),
    [
        (ENGINE_URL, (ENGINE,)),
        ("vaults://db.example/jobs", (ENGINE, FCNTL)),
        ("plain://x", (STORAGE_ONLY, FCNTL)),
        ("sqlite:///.workhive/hive.db", (ENGINE, FCNTL)),
    ],
)
def test_the_config_default_is_the_provider_the_hive_builds(storage: str, plugins: tuple[Any, ...]) -> None:
    chosen = manager(*plugins)
    config = load_config(env={"WORKHIVE_STORAGE": storage}, search_from=None, manager=chosen)
    assert config.source("locks") == "default"
    if storage.startswith("sqlite"):
        assert config["locks"] == DEFAULT_LOCKS
        return
    built = workhive.open(storage, manager=chosen).locks()
    assert config["locks"] == built.url  # type: ignore[attr-defined]


def test_a_locks_setting_given_is_kept_and_the_plugins_are_not_asked() -> None:
    asked: list[bool] = []

    class Counting(PluginManager):
        def get(self, kind: str, name_or_scheme: str) -> Any:
            asked.append(True)
            return super().get(kind, name_or_scheme)

    config = load_config(
        env={"WORKHIVE_STORAGE": ENGINE_URL, "WORKHIVE_LOCKS": "fcntl:///mine"},
        search_from=None,
        manager=Counting(entry_points=False, extra=[ENGINE]),
    )
    assert (config["locks"], config.source("locks")) == ("fcntl:///mine", "env WORKHIVE_LOCKS")
    assert asked == []


_ENGINE_SOURCE = """
import workhive

class _Locks:
    def __init__(self, url):
        self.url = url
    async def close(self):
        return None

@workhive.hookimpl
def workhive_locks():
    return workhive.LocksPlugin(name="vault", factory=_Locks)
"""


def test_workhive_config_shows_the_engine_locks_as_the_default_without_the_password(
    fake_distribution: Callable[..., None], tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_distribution("workhive-vault", "1.0", {"vault": _ENGINE_SOURCE})
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("WORKHIVE_LOCKS", raising=False)
    result = CliRunner().invoke(cli, ["--storage", ENGINE_URL, "config", "--json"])
    assert result.exit_code == 0, result.output
    locks = json.loads(result.output)["settings"]["locks"]
    assert locks == {"value": ENGINE_URL.replace(":s3cret@", ":***@"), "source": "default"}
    assert "s3cret" not in result.output


def test_a_fleet_whose_default_locks_cannot_be_built_says_so_without_blaming_a_flag() -> None:
    chosen = manager(STORAGE_ONLY)  # no fcntl: the default for plain:// cannot be built
    options = FleetOptions(
        pool="jobs", handler="m:f", storage="plain://x", locks=default_locks_url("plain://x", chosen)
    )
    with pytest.raises(ConfigError, match=r"^the default lock provider for this storage cannot be used") as info:
        check_lock_provider(workhive.open("plain://x", manager=chosen), options)
    assert "workhive-fcntl-locks" in str(info.value)

    given = "vault://app:s3cret@db.example/jobs"
    options = FleetOptions(pool="jobs", handler="m:f", storage="plain://x", locks=given)
    with pytest.raises(ConfigError, match=r"^--locks 'vault://app:\*\*\*@db.example/jobs' cannot be used") as info:
        check_lock_provider(workhive.open("plain://x", locks=given, manager=chosen), options)
    assert "s3cret" not in str(info.value)
