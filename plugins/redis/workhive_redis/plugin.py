"""The ``redis`` plugin: storage and fleet-wide locks (``redis://``, ``rediss://``, ``unix://``,
``redis+cluster://``, ``redis+sentinel://``).

This module imports nothing heavy; redis-py and the backend load when a
Redis URL is opened.
"""

from __future__ import annotations

from typing import Any

from workhive.hookspecs import hookimpl
from workhive.plugin_types import LocksPlugin, StoragePlugin

__all__ = ["workhive_locks", "workhive_storage"]

#: storage and locks answer the same URLs (workhive_redis.url): one server, a cluster's nodes, or sentinels
_SCHEMES = ("redis", "rediss", "unix", "redis+cluster", "rediss+cluster", "redis+sentinel", "rediss+sentinel")


def _open(url: str, **options: Any) -> Any:
    from workhive_redis.backend import RedisStorage

    return RedisStorage(url, **options)


def _open_locks(url: str) -> Any:
    from workhive_redis.locks import RedisLocks

    return RedisLocks(url)


@hookimpl
def workhive_storage() -> StoragePlugin:
    return StoragePlugin(
        name="redis",
        factory=_open,
        description=(
            "Redis server, Redis Cluster or Sentinel: one Lua script per operation, safe across machines "
            "(redis://, rediss://, unix://, redis+cluster://, redis+sentinel://)"
        ),
        schemes=_SCHEMES,
        options=("clock_offset", "create", "clock"),
    )


@hookimpl
def workhive_locks() -> LocksPlugin:
    return LocksPlugin(
        name="redis",
        factory=_open_locks,
        description="fleet-wide locks on Redis: rising fencing tokens, a dead holder's lock frees itself",
        schemes=_SCHEMES,
    )
