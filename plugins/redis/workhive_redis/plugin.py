"""The ``redis`` plugin: storage (``redis://``, ``rediss://``, ``unix://``) and fleet-wide locks.

This module imports nothing heavy; redis-py and the backend load when a
Redis URL is opened.
"""

from __future__ import annotations

from typing import Any

from workhive.hookspecs import hookimpl
from workhive.plugin_types import LocksPlugin, StoragePlugin

__all__ = ["workhive_locks", "workhive_storage"]

_STORAGE_OPTIONS = ("clock_offset", "create", "clock")


def _open(url: str, **options: Any) -> Any:
    from workhive.errors import ConfigError
    from workhive.urls import redact_url
    from workhive_redis.backend import RedisStorage

    unknown = sorted(set(options) - set(_STORAGE_OPTIONS))
    if unknown:
        raise ConfigError(
            f"Redis storage does not take the option(s) {', '.join(unknown)}; it accepts "
            f"{', '.join(_STORAGE_OPTIONS)} (and URL options such as ?prefix=)",
            url=redact_url(url),
        )
    return RedisStorage(url, **options)


def _open_locks(url: str) -> Any:
    from workhive_redis.locks import RedisLocks

    return RedisLocks(url)


@hookimpl
def workhive_storage() -> StoragePlugin:
    return StoragePlugin(
        name="redis",
        factory=_open,
        description="Redis server: one Lua script per operation, safe across machines (redis://, rediss://, unix://)",
        schemes=("redis", "rediss", "unix"),
    )


@hookimpl
def workhive_locks() -> LocksPlugin:
    return LocksPlugin(
        name="redis",
        factory=_open_locks,
        description="fleet-wide locks on Redis: rising fencing tokens, a dead holder's lock frees itself",
        schemes=("redis", "rediss", "unix"),
    )
