"""The lock contract, run against in-process memory locks."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from workhive.errors import ConfigError
from workhive.locks import LockProvider
from workhive.testing.locks import LockContract
from workhive_memory.locks import MemoryLocks


class TestMemoryLocks(LockContract):
    # Providers made for the same tmp_path share the named store memory://<hash>.
    persistent_tokens = True

    def make_provider(self, tmp_path: Path) -> LockProvider:
        return MemoryLocks("memory://locks-" + hashlib.sha256(str(tmp_path).encode()).hexdigest()[:16])


@pytest.mark.asyncio
async def test_private_stores_do_not_share_locks() -> None:
    a, b = MemoryLocks("memory://"), MemoryLocks("memory://")
    held_a = await a.acquire("x", ttl=None, timeout=0, worker_id=None)
    held_b = await b.acquire("x", ttl=None, timeout=0, worker_id=None)
    await a.release(held_a)
    await b.release(held_b)


@pytest.mark.parametrize("url", ["sqlite:///x", "memory://a/b", "memory://a?x=1", 5])
def test_malformed_urls_raise_config_error(url: object) -> None:
    with pytest.raises(ConfigError):
        MemoryLocks(url)  # type: ignore[arg-type]
