"""The storage contract suite and the model test against Redis, each test under its own prefix."""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

from redis_server import new_prefix, url_for
from workhive_redis import RedisStorage

from workhive.testing import StorageContract, StorageStatefulContract
from workhive.testing.clock import ManualClock

_prefixes: dict[pathlib.Path, str] = {}


def _prefix(tmp_path: pathlib.Path) -> str:
    """One prefix per test directory: make_backend and make_missing_backend see the same hive."""
    prefix = _prefixes.get(tmp_path)
    if prefix is None:
        prefix = _prefixes[tmp_path] = new_prefix()
    return prefix


def _backend(
    clock: Callable[[], float] | None, tmp_path: pathlib.Path, create: bool = True, exact: bool = False
) -> RedisStorage:
    url = url_for(_prefix(tmp_path))
    if exact:
        return RedisStorage(url, clock=clock, create=create)
    offset = clock.offset if isinstance(clock, ManualClock) else None
    return RedisStorage(url, clock_offset=offset, create=create)


class TestRedisContract(StorageContract):
    """The server's TIME, moved forward by the suite through ``clock_offset``."""

    exact = False
    #: the server's clock runs during a test: times are compared within this, exact boundaries
    #: run in TestRedisExactClockContract
    clock_drift = 5.0

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> RedisStorage:
        return _backend(clock, tmp_path, exact=self.exact)

    def make_missing_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> RedisStorage:
        return _backend(clock, tmp_path, create=False, exact=self.exact)

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        return url_for(_prefix(tmp_path)), {}


class TestRedisRealClockContract(TestRedisContract):
    supports_manual_clock = False


class TestRedisExactClockContract(TestRedisContract):
    """The suite's manual clock replaces TIME in the scripts, so the exact-boundary tests run too."""

    exact = True
    clock_drift = 0.0


class TestRedisStatefulContract(StorageStatefulContract):
    """The model test on the server's TIME, moved forward through ``clock_offset``."""

    clock_drift = 5.0  # the most real time one storage call takes (the server's clock runs meanwhile)

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> RedisStorage:
        return _backend(clock, tmp_path)
