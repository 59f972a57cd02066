"""The PostgreSQL server the tests use, and a schema of their own for each test (helpers).

The server is ``WORKHIVE_POSTGRES_URL`` (default ``postgresql://postgres@127.0.0.1:5432/test``).
When it cannot be reached the tests are skipped with the reason, except under
``WORKHIVE_REQUIRE_SERVICES=1`` (CI), where they fail. Every schema a test
creates is dropped when the test ends, so parallel runs never meet.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import pathlib
from typing import Any

import pytest

from workhive.errors import WorkhiveError

SERVER = os.environ.get("WORKHIVE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
_created: list[str] = []
_reachable: str | None = None  # None: not checked yet; "": reachable; else why not


def server_problem() -> str:
    """Empty when the server answers; otherwise why it does not."""
    global _reachable
    if _reachable is None:
        import asyncpg

        async def probe() -> None:
            conn = await asyncpg.connect(SERVER, timeout=5)
            await conn.close()

        try:
            asyncio.run(probe())
            _reachable = ""
        except Exception as exc:
            _reachable = f"PostgreSQL at {SERVER.rsplit('@', 1)[-1]} is not reachable ({type(exc).__name__}: {exc})"
    return _reachable


def require_server() -> None:
    problem = server_problem()
    if problem:
        if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{problem}; WORKHIVE_REQUIRE_SERVICES=1 requires it", pytrace=False)
        pytest.skip(problem)


def schema_for(key: str | pathlib.Path) -> str:
    """A schema name of this test run's own, dropped after the test."""
    digest = hashlib.sha256(f"{key}-{os.getpid()}".encode()).hexdigest()[:16]
    name = f"wh_test_{digest}"
    _created.append(name)
    return name


def url_for(schema: str, base: str = SERVER) -> str:
    return f"{base}?schema={schema}"


def drop_schemas(names: list[str], base: str = SERVER) -> None:
    import asyncpg

    async def drop() -> None:
        conn = await asyncpg.connect(base, timeout=10)
        try:
            for name in names:
                await conn.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
        finally:
            await conn.close()

    asyncio.run(drop())


def drop_created() -> None:
    """Drop every schema ``schema_for`` named since the last call."""
    if _created:
        names = list(_created)
        _created.clear()
        drop_schemas(names)


# -- what the open, schema and failure tests share -----------------------------------
SECRET = "pw-s3cr3t-never-shown"


def with_password(url: str) -> str:
    # The shared test server trusts local connections: any password is accepted.
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")


async def sql(query: str, *args: Any) -> Any:
    """The rows of one statement on a connection of its own to the server."""
    import asyncpg

    conn = await asyncpg.connect(SERVER)
    try:
        return await conn.fetch(query, *args)
    finally:
        await conn.close()


async def schema_exists(schema: str) -> bool:
    return bool(await sql("SELECT 1 FROM pg_namespace WHERE nspname = $1", schema))


def assert_secret_free(*texts: object) -> None:
    for text in texts:
        assert SECRET not in str(text), f"the password leaked into: {text}"


async def open_error(url: str, **options: Any) -> WorkhiveError:
    """The error opening ``url`` raises, checked to show the password nowhere."""
    from workhive_postgres import PostgresStorage

    storage = PostgresStorage(url, **options)
    assert_secret_free(repr(storage), storage.url, storage.config)
    with pytest.raises(WorkhiveError) as info:
        await storage.open()
    assert_secret_free(str(info.value), repr(info.value), info.value.args)
    return info.value
