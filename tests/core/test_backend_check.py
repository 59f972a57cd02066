"""``Hive()`` checks its backend against ``StorageBackend`` when built and names every gap at once."""

from __future__ import annotations

from typing import Any

import pytest

from workhive.errors import PluginValidationError
from workhive.hive import Hive
from workhive.plugin_manager import PluginManager
from workhive.storage import REQUIRED_METHODS


def _complete_backend() -> type:
    async def method(self: Any, *args: Any) -> None:
        return None

    return type("Complete", (), {"capabilities": frozenset(), **{name: method for name in REQUIRED_METHODS}})


def test_a_complete_backend_is_accepted() -> None:
    Hive(_complete_backend()(), manager=PluginManager(entry_points=False))


def test_every_missing_and_every_sync_method_is_named() -> None:
    cls = _complete_backend()
    del cls.claim
    del cls.reap
    cls.stats = lambda self, pool: None  # a plain function where a coroutine function belongs
    cls.heartbeat = lambda self, worker_id: None
    with pytest.raises(PluginValidationError) as info:
        Hive(cls(), manager=PluginManager(entry_points=False))
    message = str(info.value)
    assert "missing claim, reap" in message
    assert "not async (define them with async def): stats, heartbeat" in message
    assert "Complete" in message


def test_capabilities_must_be_a_set_of_names() -> None:
    cls = _complete_backend()
    cls.capabilities = ["notify"]
    with pytest.raises(PluginValidationError, match="capabilities"):
        Hive(cls(), manager=PluginManager(entry_points=False))


def test_the_list_follows_the_protocol() -> None:
    assert "claim" in REQUIRED_METHODS and "state_delete" in REQUIRED_METHODS and "open" in REQUIRED_METHODS
    assert "complete_and_claim" not in REQUIRED_METHODS  # optional (CompletesAndClaims)


@pytest.mark.parametrize("value", [0, 1025, "512", 512.0, True])
def test_an_instant_claim_max_is_an_int_from_1_to_1024(value: object) -> None:
    cls = _complete_backend()
    cls.instant_claim_max = value
    with pytest.raises(PluginValidationError, match=r"instant_claim_max must be an int from 1 to 1024, got "):
        Hive(cls(), manager=PluginManager(entry_points=False))


@pytest.mark.parametrize("value", [None, 1, 512, 1024])
def test_an_instant_claim_max_in_range_or_none_is_accepted(value: object) -> None:
    cls = _complete_backend()
    cls.instant_claim_max = value
    Hive(cls(), manager=PluginManager(entry_points=False))
