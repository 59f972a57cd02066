"""Rule F1's unknown options: the core refuses a factory option its plugin does not declare, once for every plugin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import workhive
from workhive.errors import ConfigError, PluginValidationError
from workhive.plugin_manager import PluginManager
from workhive.plugin_types import StoragePlugin


class _Provides:
    def __init__(self, plugin: StoragePlugin) -> None:
        self.plugin = plugin

    @workhive.hookimpl
    def workhive_storage(self) -> StoragePlugin:
        return self.plugin


def _manager_with(plugin: StoragePlugin) -> PluginManager:
    return PluginManager(entry_points=False, extra=[("spy", _Provides(plugin))])


def test_an_undeclared_option_is_a_config_error_naming_it_and_the_accepted_ones_and_the_factory_never_runs() -> None:
    """F1: a typo in a factory option is refused before the plugin's factory is called."""
    calls: list[tuple[str, dict[str, Any]]] = []
    plugin = StoragePlugin(
        name="spy", factory=lambda url, **options: calls.append((url, options)), options=("clock", "create")
    )
    with pytest.raises(ConfigError) as info:
        workhive.open("spy://", manager=_manager_with(plugin), creat=False, bogus=1)
    message = str(info.value)
    assert "bogus, creat" in message  # every unknown option, sorted
    assert "clock=, create=" in message  # and what to use instead
    assert "spy storage" in message
    assert (info.value.unknown, info.value.accepted) == (["bogus", "creat"], ["clock", "create"])  # type: ignore[attr-defined]
    assert calls == []


def test_declared_options_reach_the_factory_unchanged() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def factory(url: str, **options: Any) -> Any:
        seen.append((url, options))
        raise RuntimeError("stop here: the hive itself is not under test")

    plugin = StoragePlugin(name="spy", factory=factory, options=("clock", "create"))
    with pytest.raises(RuntimeError, match="stop here"):
        workhive.open("spy://x", manager=_manager_with(plugin), create=False)
    assert seen == [("spy://x", {"create": False})]


def test_a_plugin_declaring_no_options_leaves_the_check_to_its_factory() -> None:
    seen: list[dict[str, Any]] = []
    plugin = StoragePlugin(name="spy", factory=lambda url, **options: seen.append(options))
    assert plugin.options is None
    plugin.open("spy://", anything=1)
    assert seen == [{"anything": 1}]


def test_a_plugin_declaring_an_empty_tuple_takes_no_options() -> None:
    plugin = StoragePlugin(name="spy", factory=lambda url, **options: None, options=())
    with pytest.raises(ConfigError, match="accepts no options"):
        plugin.open("spy://", create=True)


def test_the_refusal_never_shows_the_urls_password() -> None:
    plugin = StoragePlugin(name="spy", factory=lambda url, **options: None, options=("create",))
    with pytest.raises(ConfigError) as info:
        plugin.open("spy://user:s3cr3t-canary@host/db", bogus=1)
    assert "s3cr3t-canary" not in str(info.value)
    assert "s3cr3t-canary" not in repr(vars(info.value))


@pytest.mark.parametrize("options", [("not an identifier",), (1,), ("create", "")])
def test_a_descriptor_declaring_a_name_that_cannot_be_a_keyword_is_refused(options: tuple[Any, ...]) -> None:
    with pytest.raises(PluginValidationError, match="keyword"):
        StoragePlugin(name="spy", factory=lambda url: None, options=options)


def test_one_option_given_as_a_string_is_one_name_not_its_letters() -> None:
    plugin = StoragePlugin(name="spy", factory=lambda url, **options: None, options="create")  # type: ignore[arg-type]
    assert plugin.options == ("create",)


def test_every_installed_storage_plugin_declares_its_options_and_refuses_others() -> None:
    """F1: each storage plugin in this repository leaves the unknown-option check to the core."""
    manager = PluginManager()
    names = manager.names("storage")
    if not names:
        pytest.skip("no storage plugin is installed in this environment (the core env installs none)")
    for name in names:
        plugin = manager.get("storage", name)
        assert plugin.options is not None, f"{name} declares no options, so the core cannot check them"
        assert "create" in plugin.options, f"{name}: every factory takes create= (rule F1)"
        with pytest.raises(ConfigError, match="definitely_not_an_option"):
            plugin.open(f"{plugin.all_schemes[0]}://", definitely_not_an_option=1)


def test_sqlite_refuses_an_unknown_option_as_a_config_error_and_makes_no_file(tmp_path: Path) -> None:
    """F1: ``sqlite`` had no check, so ``bogus=1`` reached ``SqliteStorage`` and raised ``TypeError``."""
    pytest.importorskip("workhive_sqlite", reason="the sqlite plugin is not installed in this environment")
    target = tmp_path / "hive.db"
    with pytest.raises(ConfigError) as info:
        workhive.open(f"sqlite:///{target}", bogus=1)
    assert "bogus" in str(info.value)
    assert "clock=, create=" in str(info.value)
    assert not target.exists()
