"""workhive storage and fleet-wide locks on Redis: ``redis://host:6379/0?prefix=NAME``.

>>> import workhive  # doctest: +SKIP
>>> hive = workhive.open("redis://127.0.0.1:6379/0", locks="redis://127.0.0.1:6379/0")

``RedisStorage`` and ``RedisLocks`` are importable from here for direct
construction (tests pass ``clock_offset=``); they load on first access, so
importing the plugin stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workhive_redis.backend import RedisStorage
    from workhive_redis.locks import RedisLocks
    from workhive_redis.url import RedisConfig, parse_url

__all__ = ["RedisConfig", "RedisLocks", "RedisStorage", "parse_url"]


def __getattr__(name: str) -> Any:
    if name == "RedisStorage":
        from workhive_redis.backend import RedisStorage

        return RedisStorage
    if name == "RedisLocks":
        from workhive_redis.locks import RedisLocks

        return RedisLocks
    if name in ("RedisConfig", "parse_url"):
        from workhive_redis import url

        return getattr(url, name)
    raise AttributeError(f"module 'workhive_redis' has no attribute {name!r}")
