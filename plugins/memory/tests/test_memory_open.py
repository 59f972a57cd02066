"""Opening a memory store: URL forms, named stores, factory options, ``create=False``, the plugin entry point."""

from __future__ import annotations

import pytest

import workhive
from workhive.errors import ConfigError, HiveNotFound
from workhive_memory.backend import MemoryStorage
from workhive_memory.url import parse_url


@pytest.mark.parametrize(
    "url", ["memory:", "memory:///x", "memory://a/b", "memory://a?x=1", "sqlite://x", "memory://-x", 42]
)
def test_malformed_urls_are_config_errors(url: object) -> None:
    with pytest.raises(ConfigError, match="memory://"):
        MemoryStorage(url)  # type: ignore[arg-type]


def test_url_names() -> None:
    assert parse_url("memory://") is None
    assert parse_url("memory://team.a_1-b") == "team.a_1-b"


def test_the_plugin_is_found_by_scheme_with_its_lock_provider() -> None:
    manager = workhive.PluginManager()
    assert manager.get("storage", "memory").name == "memory"
    assert manager.get("locks", "memory").name == "memory"
    info = {p.name: p for p in manager.plugins()}["memory"]
    assert (info.distribution, info.version, info.status) == ("workhive-memory", "0.1.0", "active")
    assert info.provides == {"storage": ("memory",), "locks": ("memory",)}


def test_unknown_factory_options_are_refused() -> None:
    with pytest.raises(ConfigError, match="synchronous"):
        workhive.open("memory://", manager=workhive.PluginManager(), synchronous="full")


@pytest.mark.asyncio
async def test_create_false_through_the_factory_opens_only_a_store_this_process_made() -> None:
    manager = workhive.PluginManager()
    with pytest.raises(HiveNotFound, match="memory://create-false-test"):
        workhive.open("memory://create-false-test", manager=manager, create=False)
    with pytest.raises(HiveNotFound, match="private"):
        workhive.open("memory://", manager=manager, create=False)
    with pytest.raises(HiveNotFound):  # the refused open made nothing
        workhive.open("memory://create-false-test", manager=manager, create=False)
    async with workhive.open("memory://create-false-test", manager=manager) as writer:
        item_id = await writer.pool("jobs").push("x")
        async with workhive.open("memory://create-false-test", manager=manager, create=False) as reader:
            assert (await reader.pool("jobs").get(item_id)).data == "x"


@pytest.mark.asyncio
async def test_a_named_store_is_shared_and_a_private_one_is_not() -> None:
    manager = workhive.PluginManager()
    async with (
        workhive.open("memory://shared-test", manager=manager) as one,
        workhive.open("memory://shared-test", manager=manager) as two,
        workhive.open("memory://", manager=manager) as private,
    ):
        item_id = await one.pool("jobs").push("x")
        assert (await two.pool("jobs").get(item_id)).data == "x"
        assert await private.pools() == []
        item = await two.pool("jobs").claim("w")
        assert item is not None and await one.pool("jobs").claim("w") is None


# -- passwords in mistyped URLs, options given twice (issue 24) ---------------------------------
@pytest.mark.parametrize("char", ["@", "?", "#", "/", ":"])
def test_a_password_in_a_mistyped_url_is_never_shown(char: str) -> None:
    url = f"memory://user:ssCANARY1{char}ssCANARY2{char}ssCANARY3@host"
    for make in (MemoryStorage, lambda u: workhive.open(u, manager=workhive.PluginManager())):
        with pytest.raises(ConfigError) as info:
            make(url)
        for text in (str(info.value), repr(info.value), repr(vars(info.value))):
            assert "CANARY" not in text, text


def test_options_given_twice_are_refused_as_memory_takes_none() -> None:
    # memory:// takes no options at all, so a repeated one is refused with the rest.
    with pytest.raises(ConfigError, match=r"no \?options"):
        workhive.open("memory://dup-test?lease=1&lease=2", manager=workhive.PluginManager())
    with pytest.raises(HiveNotFound):  # and no store of that name was made
        MemoryStorage("memory://dup-test", create=False)
