"""No store ever holds a key: results, errors and worker details are scrubbed in the core, before any backend.

The scrubbing is in ``Pool`` and ``Workers`` (``workhive.redaction``), so the same calls are made
against every backend installed, and what each one kept is read back twice: through the API, and
raw (the SQLite file's bytes, every row of the PostgreSQL schema as text, every Redis key of the
prefix). Servers that are not running skip their case, except under WORKHIVE_REQUIRE_SERVICES=1.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import quote, quote_plus

import attrs
import pytest

import workhive
from workhive.credentials import Credential, CredentialPool
from workhive.redaction import REDACTED, forget_secrets
from workhive.testing.services import POSTGRES, REDIS, drop_postgres_schema, drop_redis_prefix, require_service

#: special characters in it, so its URL-encoded and JSON-escaped forms differ from it;
#: "LEAKED" survives every encoding, so finding it anywhere means some form got through
KEY = 'sk-STORED+a/B="\\é-LEAKED'
R = REDACTED
PG = POSTGRES

RESULT = {
    "echo": f"Incorrect API key provided: {KEY}",
    "nested": {"list": [KEY, {"deep": quote_plus(KEY)}, 3, 2.5, None, True], "n": 1},
    KEY: "the key as an object key",
    "body": json.dumps({"key": KEY}),  # an API body kept as a string: the key is JSON-escaped in it
}
STORED = {
    "echo": f"Incorrect API key provided: {R}",
    "nested": {"list": [R, {"deep": R}, 3, 2.5, None, True], "n": 1},
    R: "the key as an object key",
    "body": json.dumps({"key": R}),
}
ERROR = f"HTTP 401 for GET /v1?key={quote(KEY, safe='')} body={json.dumps({'k': KEY})[1:-1]}"


@attrs.frozen
class Store:
    url: str
    #: everything the backend keeps, as bytes, read after the hive is closed (None: nothing outside the process)
    raw: Callable[[], bytes] | None


def _postgres_rows(schema: str) -> bytes:
    import asyncpg

    async def read() -> bytes:
        conn = await asyncpg.connect(host=PG[0], port=PG[1], user="postgres", database="test")
        try:
            tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)
            assert tables, f"no tables in schema {schema}"
            rows = []
            for table in tables:
                rows += await conn.fetch(f'SELECT t::text AS row FROM "{schema}"."{table["tablename"]}" t')
            return "\n".join(r["row"] for r in rows).encode()
        finally:
            await conn.close()

    return asyncio.run(read())


def _redis_keys(prefix: str) -> bytes:
    import redis

    client = redis.Redis(host=REDIS[0], port=REDIS[1])
    try:
        out: list[bytes] = []
        keys = list(client.scan_iter(match=f"*{prefix}*", count=1000))
        assert keys, f"no keys under {prefix}"
        for key in keys:
            kind = client.type(key).decode()
            value = {
                "string": lambda k: client.get(k),
                "hash": lambda k: client.hgetall(k),
                "list": lambda k: client.lrange(k, 0, -1),
                "set": lambda k: client.smembers(k),
                "zset": lambda k: client.zrange(k, 0, -1, withscores=True),
                "stream": lambda k: client.xrange(k),
            }[kind](key)
            out.append(key + b" " + repr(value).encode())
        return b"\n".join(out)
    finally:
        client.close()


@pytest.fixture(params=["memory", "sqlite", "postgres", "redis"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    kind = request.param
    pytest.importorskip(f"workhive_{kind}")
    name = f"whsecrets_{uuid.uuid4().hex[:12]}"
    if kind == "memory":
        yield Store(f"memory://{name}", None)
    elif kind == "sqlite":
        path = tmp_path / "hive.db"
        yield Store(f"sqlite:///{path}", lambda: b"".join(p.read_bytes() for p in tmp_path.glob("hive.db*")))
    elif kind == "postgres":
        require_service("PostgreSQL", PG)
        try:
            yield Store(f"postgresql://postgres@{PG[0]}:{PG[1]}/test?schema={name}", lambda: _postgres_rows(name))
        finally:
            drop_postgres_schema(name)
    else:
        require_service("Redis", REDIS)
        try:
            yield Store(f"redis://{REDIS[0]}:{REDIS[1]}/0?prefix={name}", lambda: _redis_keys(name))
        finally:
            drop_redis_prefix(name)


@pytest.fixture(autouse=True)
def _no_secrets_left() -> Iterator[None]:
    forget_secrets()
    yield
    forget_secrets()


def test_results_errors_and_worker_details_are_stored_scrubbed(store: Store) -> None:
    async def run() -> None:
        CredentialPool([Credential("STORED_KEY", KEY)])  # a process holding the key registers it
        async with workhive.open(store.url) as hive:
            pool = hive.pool("jobs")
            ids = await pool.push_many([{"n": i} for i in range(6)])
            first = await pool.claim("w1")
            await pool.complete(first, RESULT)
            second = await pool.claim("w1")
            await pool.complete(second.receipt, RESULT)  # by receipt, as another process would
            third = await pool.claim("w1")
            fourth = await pool.complete_and_claim(third, RESULT, "w1")
            assert fourth is not None
            assert await pool.complete_many([(fourth, RESULT)]) == [True]
            fifth = await pool.claim("w1")
            await pool.fail(fifth, RuntimeError(ERROR), poison=True)
            sixth = await pool.claim("w1")
            # Durable steps (ctx.step) keep results too: one stored, one that failed permanently.
            await pool.put_step(sixth, "call", RESULT)
            await pool.put_step(sixth.receipt, "refused", ERROR, failed=True)
            await pool.fail(sixth.receipt, ERROR, retry_in=3600)

            await hive.workers.register(worker_id="w-keyed", pools=("jobs",), capabilities=(f"key={quote(KEY)}",))
            await hive.workers.update_status("w-keyed", "busy", f"calling the API with {KEY}")

            for item_id in ids[:4]:
                item = await pool.get(item_id)
                assert item.state is workhive.ItemState.DONE
                assert item.result == STORED  # the same shape, every string with the key scrubbed
            errors = [(await pool.get(item_id)).error for item_id in ids[4:]]
            scrubbed = f"HTTP 401 for GET /v1?key={R} body={json.dumps({'k': R})[1:-1]}"
            assert errors == [f"RuntimeError: {scrubbed}", scrubbed]
            steps = await pool.steps(sixth.id)
            assert [(s.key, s.value) for s in steps] == [("call", STORED), ("refused", scrubbed)]
            worker = await hive.workers.get("w-keyed")
            assert worker.capabilities == (f"key={R}",) and worker.detail == f"calling the API with {R}"

    asyncio.run(run())
    assert "LEAKED" not in json.dumps(STORED)  # the expectation itself holds no part of the key
    if store.raw is not None:
        raw = store.raw()
        assert REDACTED.encode() in raw  # the read does see the stored results and errors
        assert b"LEAKED" not in raw


def test_a_clean_result_is_stored_exactly(store: Store) -> None:
    async def run() -> None:
        CredentialPool([Credential("STORED_KEY", KEY)])
        clean = {"text": "no key here, 100% \\ sure", "a": [1, 2.5, None, {"b": "é\u001b"}]}
        async with workhive.open(store.url) as hive:
            pool = hive.pool("jobs")
            [item_id] = await pool.push_many([{"n": 1}])
            await pool.complete(await pool.claim("w1"), clean)
            assert (await pool.get(item_id)).result == clean

    asyncio.run(run())
