"""The lock contract suite against Redis: two providers over one prefix are two processes."""

from __future__ import annotations

from pathlib import Path

from redis_server import new_prefix, url_for
from workhive_redis import RedisLocks

from workhive.testing.locks import LockContract

_prefixes: dict[Path, str] = {}


class TestRedisLockContract(LockContract):
    persistent_tokens = True

    def make_provider(self, tmp_path: Path) -> RedisLocks:
        # Same tmp_path, same prefix: the suite's second provider sees the same locks.
        prefix = _prefixes.get(tmp_path)
        if prefix is None:
            prefix = _prefixes[tmp_path] = new_prefix()
        return RedisLocks(url_for(prefix))
