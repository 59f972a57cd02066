"""The storage contract, its model test's shape, and the lock contract, through ``redis+sentinel://``.

One private set-up for the module (``redis_sentinel_server``: a master, a
replica, three sentinels on free ports); each test under a prefix of its own
on that master, found through the sentinels. The suites are subclassed as
``test_redis_contract`` and ``test_redis_locks`` do for ``redis://``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest
import redis_contracts
from redis_sentinel_server import SentinelSetup
from redis_server import new_prefix
from workhive_redis import RedisLocks

from workhive.testing.locks import LockContract

_setup: list[SentinelSetup] = []
_prefixes: dict[pathlib.Path, str] = {}


@pytest.fixture(scope="module", autouse=True)
def _sentinels(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    setup = SentinelSetup(tmp_path_factory.mktemp("sentinel"))
    try:
        setup.start()
        _setup.append(setup)
        yield
    finally:
        _setup.clear()
        setup.stop()


def _url(tmp_path: pathlib.Path) -> str:
    """One prefix per test directory: make_backend and make_missing_backend see the same hive."""
    prefix = _prefixes.get(tmp_path)
    if prefix is None:
        prefix = _prefixes[tmp_path] = new_prefix()
    return _setup[0].url(prefix)


class TestRedisSentinelContract(redis_contracts.TestRedisDeploymentContract):
    """The server's TIME, moved forward by the suite through ``clock_offset``, as in TestRedisContract."""

    def store_url(self, tmp_path: pathlib.Path) -> str:
        return _url(tmp_path)


class TestRedisSentinelLockContract(LockContract):
    persistent_tokens = True

    def make_provider(self, tmp_path: pathlib.Path) -> RedisLocks:
        # Same tmp_path, same prefix: the suite's second provider sees the same locks.
        return RedisLocks(_url(tmp_path))
