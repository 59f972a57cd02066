"""The distribution is found through its entry point, like any installed plugin."""

from __future__ import annotations

import pytest

import workhive
from workhive.errors import ConfigError


def test_the_entry_point_provides_the_list_scheme() -> None:
    manager = workhive.PluginManager()
    plugin = manager.get("storage", "list")
    assert plugin.name == "listbackend"
    assert "listbackend" in [p.name for p in manager.plugins() if p.status == "active"]


@pytest.mark.asyncio
async def test_open_by_url() -> None:
    async with workhive.open("list://", manager=workhive.PluginManager()) as hive:
        pool = hive.pool("jobs")
        await pool.push({"n": 1})
        item = await pool.claim("me")
        assert item is not None
        await pool.complete(item, "ok")
        assert (await pool.get(item.id)).result == "ok"


def test_malformed_url_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="list://"):
        workhive.open("list://not/a/name", manager=workhive.PluginManager())


def test_unknown_factory_options_are_config_errors() -> None:
    with pytest.raises(ConfigError, match="synchronous"):
        workhive.open("list://", manager=workhive.PluginManager(), synchronous="full")


def test_create_false_through_the_factory() -> None:
    with pytest.raises(workhive.HiveNotFound, match="list://never-made"):
        workhive.open("list://never-made", manager=workhive.PluginManager(), create=False)


@pytest.mark.parametrize("char", ["@", "?", "#", "/", ":"])
def test_a_password_in_a_mistyped_url_is_never_shown(char: str) -> None:
    url = f"list://user:ssCANARY1{char}ssCANARY2{char}ssCANARY3@host"
    with pytest.raises(ConfigError) as info:
        workhive.open(url, manager=workhive.PluginManager())
    for text in (str(info.value), repr(info.value), repr(vars(info.value))):
        assert "CANARY" not in text, text


def test_options_given_twice_are_refused_as_list_takes_none() -> None:
    with pytest.raises(ConfigError, match=r"no \?options"):
        workhive.open("list://dup?a=1&a=2", manager=workhive.PluginManager())
