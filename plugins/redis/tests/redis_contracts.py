"""The storage contract on a Redis deployment that a test module names by URL (a cluster, sentinels).

Subclasses say where a test's hive lives (``store_url``); the rest is the same
for every deployment: the servers' TIME, moved forward by the suite through
``clock_offset`` (as ``TestRedisContract`` does on the plain server).

Test modules subclass it through the module (``redis_contracts.TestRedisDeploymentContract``):
a name imported into a test module would be collected and run as a suite of its own.
"""

from __future__ import annotations

import pathlib
from collections.abc import Callable
from typing import Any

from workhive_redis import RedisStorage

from workhive.testing import StorageContract
from workhive.testing.clock import ManualClock


class TestRedisDeploymentContract(StorageContract):
    """``StorageContract`` on the hive at ``store_url(tmp_path)`` (one per test directory)."""

    clock_drift = 5.0

    def store_url(self, tmp_path: pathlib.Path) -> str:
        raise NotImplementedError("a subclass names the URL of its deployment")

    def make_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> RedisStorage:
        offset = clock.offset if isinstance(clock, ManualClock) else None
        return RedisStorage(self.store_url(tmp_path), clock_offset=offset)

    def make_missing_backend(self, clock: Callable[[], float] | None, tmp_path: pathlib.Path) -> RedisStorage:
        offset = clock.offset if isinstance(clock, ManualClock) else None
        return RedisStorage(self.store_url(tmp_path), clock_offset=offset, create=False)

    def multiprocess_store(self, tmp_path: pathlib.Path) -> tuple[str, dict[str, Any]]:
        return self.store_url(tmp_path), {}
