"""The plugin manager: discovery, validation, conflicts, blocking, broken plugins."""

from __future__ import annotations

import types
import warnings

import pytest

import workhive
from workhive import PluginManager
from workhive.errors import PluginConflict, PluginLoadError, PluginNotFound, PluginValidationError


def storage_plugin(name: str, *schemes: str) -> types.SimpleNamespace:
    @workhive.hookimpl
    def workhive_storage() -> workhive.StoragePlugin:
        return workhive.StoragePlugin(name=name, factory=lambda url: url, schemes=schemes)

    return types.SimpleNamespace(workhive_storage=workhive_storage)


STORAGE_SOURCE = """
import workhive

@workhive.hookimpl
def workhive_storage():
    return workhive.StoragePlugin(name="{name}", factory=lambda url: ("opened", url), description="test")
"""


def test_builtins_are_registered_like_plugins() -> None:
    manager = PluginManager(entry_points=False)
    info = {p.name: p for p in manager.plugins()}
    assert info["builtin-backoff"].builtin
    assert info["builtin-backoff"].distribution == "workhive"
    assert "full-jitter" in manager.names("backoff")


def test_unknown_name_lists_installed_and_the_package_to_install() -> None:
    manager = PluginManager(entry_points=False, extra=[("mine", storage_plugin("mine"))])
    with pytest.raises(PluginNotFound) as err:
        manager.get("storage", "sqlite")
    message = str(err.value)
    assert "installed: mine" in message
    assert "pip install workhive-sqlite" in message
    assert isinstance(err.value, LookupError)


def test_lookup_by_scheme_alias() -> None:
    manager = PluginManager(entry_points=False, extra=[("pg", storage_plugin("postgres", "postgresql"))])
    assert manager.get("storage", "postgresql").name == "postgres"
    assert manager.get("storage", "postgres").name == "postgres"


def test_a_scheme_may_join_words_with_plus_but_a_name_may_not() -> None:
    """``redis+sentinel://`` needs a scheme with ``+`` (RFC 3986); plugin names keep their stricter form."""
    manager = PluginManager(entry_points=False, extra=[("r", storage_plugin("redis", "redis+sentinel"))])
    assert manager.get("storage", "redis+sentinel").name == "redis"
    with pytest.raises(PluginValidationError, match="redis sentinel"):
        workhive.StoragePlugin(name="redis", factory=lambda url: url, schemes=("redis sentinel",))
    with pytest.raises(PluginValidationError, match="redis\\+sentinel"):
        workhive.StoragePlugin(name="redis+sentinel", factory=lambda url: url)


def test_two_plugins_claiming_one_name_are_refused_naming_both() -> None:
    with pytest.raises(PluginConflict) as err:
        PluginManager(entry_points=False, extra=[("a", storage_plugin("dup")), ("b", storage_plugin("dup"))])
    assert "'a'" in str(err.value) and "'b'" in str(err.value)


def test_entry_point_conflict_names_distributions_and_versions(fake_distribution) -> None:
    fake_distribution("wh-store-one", "1.2.3", {"store-one": STORAGE_SOURCE.format(name="same")})
    fake_distribution("wh-store-two", "4.5.6", {"store-two": STORAGE_SOURCE.format(name="same")})
    with pytest.raises(PluginConflict) as err:
        PluginManager(disabled=())
    message = str(err.value)
    assert "wh-store-one 1.2.3" in message and "wh-store-two 4.5.6" in message
    # Blocking one of them resolves the conflict.
    manager = PluginManager(disabled=["store-two"])
    assert manager.get("storage", "same").factory("x://") == ("opened", "x://")


def test_invalid_descriptor_is_rejected_with_the_plugin_named() -> None:
    @workhive.hookimpl
    def workhive_storage() -> object:
        return {"name": "not-a-descriptor"}

    with pytest.raises(PluginValidationError, match="'weird'"):
        PluginManager(entry_points=False, extra=[("weird", types.SimpleNamespace(workhive_storage=workhive_storage))])


@pytest.mark.parametrize("bad", ["", "Upper", "has space", "-dash", "x" * 65, "semi;colon"])
def test_descriptor_names_are_validated(bad: str) -> None:
    with pytest.raises(PluginValidationError):
        workhive.StoragePlugin(name=bad, factory=lambda url: url)


def test_descriptor_factory_must_be_callable() -> None:
    with pytest.raises(PluginValidationError, match="callable"):
        workhive.BackoffPlugin(name="x", factory="not callable")  # type: ignore[arg-type]


def test_entry_point_plugin_is_discovered_with_its_distribution(fake_distribution) -> None:
    fake_distribution("wh-good", "0.3.0", {"good": STORAGE_SOURCE.format(name="good")})
    manager = PluginManager(disabled=())
    info = {p.name: p for p in manager.plugins()}
    assert info["good"].distribution == "wh-good"
    assert info["good"].version == "0.3.0"
    assert info["good"].status == "active"
    assert info["good"].provides == {"storage": ("good",)}


def test_disabled_plugin_is_blocked_and_not_imported(fake_distribution) -> None:
    fake_distribution("wh-boom", "0.1.0", {"boom": "raise RuntimeError('must not be imported')\n"})
    manager = PluginManager(disabled=["boom"])
    assert {p.name: p.status for p in manager.plugins()}["boom"] == "blocked"


def test_disable_list_comes_from_the_environment(fake_distribution, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_distribution("wh-good", "0.3.0", {"good": STORAGE_SOURCE.format(name="good")})
    monkeypatch.setenv("WORKHIVE_DISABLE_PLUGINS", " other , good ")
    manager = PluginManager()
    assert {p.name: p.status for p in manager.plugins()}["good"] == "blocked"
    with pytest.raises(PluginNotFound, match="no storage plugin named 'good'"):
        manager.get("storage", "good")


def test_broken_plugin_raises_in_library_mode(fake_distribution) -> None:
    fake_distribution("wh-broken", "0.0.1", {"broken": "import not_a_real_module_xyz\n"})
    with pytest.raises(PluginLoadError) as err:
        PluginManager(disabled=())
    assert "wh-broken 0.0.1" in str(err.value)
    assert "WORKHIVE_DISABLE_PLUGINS=broken" in str(err.value)


def test_broken_plugin_is_a_warning_in_cli_mode_and_the_rest_work(fake_distribution) -> None:
    fake_distribution("wh-broken", "0.0.1", {"broken": "import not_a_real_module_xyz\n"})
    fake_distribution("wh-good", "0.3.0", {"good": STORAGE_SOURCE.format(name="good")})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager = PluginManager(disabled=(), on_error="warn")
    assert any("wh-broken" in str(w.message) for w in caught)
    statuses = {p.name: p.status for p in manager.plugins()}
    assert statuses["broken"] == "failed" and statuses["good"] == "active"
    assert manager.get("storage", "good").name == "good"


def test_no_plugins_loads_builtins_only(fake_distribution) -> None:
    fake_distribution("wh-good", "0.3.0", {"good": STORAGE_SOURCE.format(name="good")})
    manager = PluginManager(entry_points=False)
    assert "good" not in {p.name for p in manager.plugins()}


def test_event_hooks_are_resolved_once() -> None:
    seen: list[str] = []

    @workhive.hookimpl
    def workhive_item_completed(pool: str, item: object) -> None:
        seen.append(pool)

    quiet = PluginManager(entry_points=False)
    assert not any(quiet.event_hooks.values())
    loud = PluginManager(
        entry_points=False, extra=[("obs", types.SimpleNamespace(workhive_item_completed=workhive_item_completed))]
    )
    assert loud.event_hooks["workhive_item_completed"] is True
    assert loud.event_hooks["workhive_item_claimed"] is False
