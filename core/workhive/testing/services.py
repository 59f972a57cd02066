"""The shared test servers, for tests that need PostgreSQL or Redis: reach them, isolate, clean up.

Tests connect to the servers running on the machine (PostgreSQL at
127.0.0.1:5432, user ``postgres``, database ``test``; Redis at 127.0.0.1:6379)
and keep to a schema or key prefix of their own, dropped afterwards, because
tox runs environments in parallel against the same servers. A server that does
not answer skips the test with the reason, except under
``WORKHIVE_REQUIRE_SERVICES=1`` (CI), where it fails.

>>> with isolated_store("sqlite", tmp_path) as url:  # doctest: +SKIP
...     async with workhive.open(url) as hive:
...         ...
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

__all__ = [
    "POSTGRES",
    "REDIS",
    "drop_postgres_schema",
    "drop_redis_prefix",
    "isolated_store",
    "require_service",
]

#: the shared PostgreSQL server (trust auth, user postgres, database test)
POSTGRES = ("127.0.0.1", 5432)
#: the shared Redis server
REDIS = ("127.0.0.1", 6379)


def require_service(name: str, address: tuple[str, int]) -> None:
    """Skip the test (fail under ``WORKHIVE_REQUIRE_SERVICES=1``) when nothing answers at ``address``."""
    import pytest

    try:
        socket.create_connection(address, timeout=3).close()
    except OSError as exc:
        reason = f"{name} is not reachable at {address[0]}:{address[1]} ({exc})"
        if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{reason}; WORKHIVE_REQUIRE_SERVICES=1 requires it")
        pytest.skip(reason)


def drop_postgres_schema(schema: str) -> None:
    """Drop ``schema`` (and everything in it) from the shared PostgreSQL server, if it exists."""
    import asyncpg  # installed with workhive-postgres

    async def drop() -> None:
        conn = await asyncpg.connect(host=POSTGRES[0], port=POSTGRES[1], user="postgres", database="test")
        try:
            await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


def drop_redis_prefix(prefix: str) -> None:
    """Delete every key of the shared Redis server that holds ``prefix`` (hash-tagged keys included)."""
    import redis  # installed with workhive-redis

    client = redis.Redis(host=REDIS[0], port=REDIS[1])
    try:
        keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


@contextlib.contextmanager
def isolated_store(kind: str, tmp_path: Path, name: str | None = None) -> Iterator[str]:
    """The URL of a store of its own for ``kind`` (memory, sqlite, postgres, redis), dropped afterwards.

    ``name`` (default: a random one) is the memory hive's name, the PostgreSQL
    schema or the Redis prefix; SQLite keeps ``hive.db`` in ``tmp_path``.
    """
    import pytest

    pytest.importorskip(f"workhive_{kind}")
    name = name or f"whtest_{uuid.uuid4().hex[:12]}"
    if kind == "memory":
        yield f"memory://{name}"
    elif kind == "sqlite":
        yield f"sqlite:///{tmp_path / 'hive.db'}"
    elif kind == "postgres":
        require_service("PostgreSQL", POSTGRES)
        try:
            yield f"postgresql://postgres@{POSTGRES[0]}:{POSTGRES[1]}/test?schema={name}"
        finally:
            drop_postgres_schema(name)
    elif kind == "redis":
        require_service("Redis", REDIS)
        try:
            yield f"redis://{REDIS[0]}:{REDIS[1]}/0?prefix={name}"
        finally:
            drop_redis_prefix(name)
    else:
        raise ValueError(f"no shared store of kind {kind!r}: memory, sqlite, postgres or redis")
