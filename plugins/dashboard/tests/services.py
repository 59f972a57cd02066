"""The shared PostgreSQL and Redis, for the tests that point the dashboard at a hive that is not there.

Each test uses a schema or key prefix of its own and removes whatever is under
it afterwards. A missing plugin or server skips with the reason, except under
``WORKHIVE_REQUIRE_SERVICES=1``, where it fails.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import uuid
from typing import Any

import pytest

POSTGRES_URL = os.environ.get("WORKHIVE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("WORKHIVE_REDIS_URL", "redis://127.0.0.1:6379/0")


def _unavailable(why: str) -> None:
    if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{why}; WORKHIVE_REQUIRE_SERVICES=1 requires it", pytrace=False)
    pytest.skip(why)


def require_plugin(module: str, distribution: str) -> None:
    if importlib.util.find_spec(module) is None:
        _unavailable(f"{distribution} is not installed (pip install -e plugins/{distribution.split('-', 1)[1]})")


def new_name() -> str:
    return f"wh_dash_{uuid.uuid4().hex[:16]}"


async def _pg(query: str, *args: object) -> list[tuple[object, ...]]:
    import asyncpg

    conn = await asyncpg.connect(POSTGRES_URL, timeout=10)
    try:
        return [tuple(r) for r in await conn.fetch(query, *args)]
    finally:
        await conn.close()


def postgres_schema_exists(schema: str) -> bool:
    rows = asyncio.run(_pg("SELECT 1 FROM pg_namespace WHERE nspname = $1", schema))
    return bool(rows)


def drop_postgres_schema(schema: str) -> None:
    asyncio.run(_pg(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


def require_postgres() -> str:
    """The base URL of the shared server (skips or fails when it is not there)."""
    require_plugin("workhive_postgres", "workhive-postgres")
    try:
        asyncio.run(_pg("SELECT 1"))
    except Exception as exc:
        _unavailable(f"PostgreSQL at {POSTGRES_URL.rsplit('@', 1)[-1]} is not reachable ({type(exc).__name__}: {exc})")
    return POSTGRES_URL


def _redis() -> Any:
    import redis

    return redis.Redis.from_url(REDIS_URL.split("?")[0], socket_timeout=10)


def redis_keys(prefix: str) -> list[bytes]:
    """Every key workhive would write under ``prefix`` (its keys start with ``{prefix}``)."""
    client = _redis()
    try:
        return [k for pattern in (f"{{{prefix}}}*", f"{{{prefix}/*") for k in client.scan_iter(match=pattern)]
    finally:
        client.close()


def delete_redis_prefix(prefix: str) -> None:
    client = _redis()
    try:
        keys = redis_keys(prefix)
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def require_redis() -> str:
    """The base URL of the shared server (skips or fails when it is not there)."""
    require_plugin("workhive_redis", "workhive-redis")
    client = _redis()
    try:
        client.ping()
    except Exception as exc:
        _unavailable(f"Redis at {REDIS_URL.rsplit('@', 1)[-1]} is not reachable ({type(exc).__name__}: {exc})")
    finally:
        client.close()
    return REDIS_URL
