"""``schema.py``: the hive's schema, created on first open, migrated once, refused when newer or not workhive's."""

from __future__ import annotations

import asyncio

import asyncpg
import postgres_server
import pytest
from postgres_server import open_error, schema_exists, sql, with_password

import workhive
from workhive.errors import SchemaVersionError, StorageUnavailable
from workhive.models import ItemState
from workhive_postgres import PostgresStorage
from workhive_postgres.schema import SCHEMA_VERSION
from workhive_postgres.sqlfiles import migrations


@pytest.mark.asyncio
async def test_first_open_creates_the_schema_and_nothing_outside_it(url: str, schema: str) -> None:
    outside_before = await sql(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname NOT LIKE 'wh_test_%' AND n.nspname NOT LIKE 'bench_%'"
    )
    async with workhive.open(url) as hive:
        await hive.pool("jobs").push(1)
    assert await schema_exists(schema)
    tables = {r[0] for r in await sql("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)}
    assert {"items", "workers", "shared_state", "locks", "meta", "migrations"} <= tables
    outside_after = await sql(
        "SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname NOT LIKE 'wh_test_%' AND n.nspname NOT LIKE 'bench_%'"
    )
    assert set(outside_after) <= set(outside_before) | {
        r for r in outside_after if r[0].startswith("pg_temp") or r[0].startswith("pg_toast")
    }
    versions = await sql(f'SELECT version FROM "{schema}".migrations ORDER BY version')
    assert [r[0] for r in versions] == list(range(1, SCHEMA_VERSION + 1))


@pytest.mark.asyncio
async def test_fifty_processes_opening_at_once_migrate_once(url: str, schema: str) -> None:
    # Fifty independent clients (each its own connection), released together.
    gate = asyncio.Event()

    async def opener() -> None:
        storage = PostgresStorage(url.replace("?", "?pool_size=1&"))
        await gate.wait()
        await storage.open()
        await storage.close()

    tasks = [asyncio.create_task(opener()) for _ in range(50)]
    await asyncio.sleep(0)
    gate.set()
    await asyncio.gather(*tasks)
    rows = await sql(f'SELECT version, count(*) FROM "{schema}".migrations GROUP BY version ORDER BY version')
    assert [(r[0], r[1]) for r in rows] == [(v, 1) for v in range(1, SCHEMA_VERSION + 1)]


@pytest.mark.asyncio
async def test_a_version_2_hive_with_items_in_every_state_migrates_and_claims_in_order(url: str, schema: str) -> None:
    """Version 3 replaces the ready index: items written before it are claimed as the contract orders them."""
    conn = await asyncpg.connect(postgres_server.SERVER)
    try:
        async with conn.transaction():
            await conn.execute(f'CREATE SCHEMA "{schema}"; SET LOCAL search_path = "{schema}"')
            for version, script in migrations()[:2]:
                await conn.execute(script)
                await conn.execute("INSERT INTO migrations (version) VALUES ($1)", version)
            now = await conn.fetchval("SELECT now_s(0)")
            rows = [  # name, state, priority, attempts, max_attempts, available_at, lease_expires_at
                ("ready", "pending", 0, 0, 5, now - 100, None),
                ("expired", "claimed", 0, 1, 5, now - 300, now - 50),
                ("spent", "claimed", 0, 3, 3, now - 400, now - 200),
                ("held", "claimed", 0, 1, 5, now - 500, now + 100),
                ("delayed", "pending", 0, 0, 5, now + 100, None),
                ("urgent", "pending", 1, 0, 5, now - 1, None),
            ]
            for name, state, priority, attempts, max_attempts, available_at, expires in rows:
                await conn.execute(
                    "INSERT INTO items (pool, payload, state, priority, attempts, max_attempts, token, created_at,"
                    " available_at, claimed_by, lease_expires_at, lease_seconds)"
                    " VALUES ('jobs', $1, $2, $3, $4::int, $5, $4::int, $6, $6, $7, $8, $9)",
                    f'"{name}"', state, priority, attempts, max_attempts, available_at,
                    "old" if state == "claimed" else None, expires, 60.0 if state == "claimed" else None,
                )  # fmt: skip
    finally:
        await conn.close()
    async with workhive.open(url) as hive:
        pool = hive.pool("jobs")
        taken = await pool.claim_many(10, "w1")
        assert [item.data for item in taken] == ["urgent", "ready", "expired"]
        assert taken[2].available_at == pytest.approx(now - 50)  # an expired lease queues from its expiry
        states = {item.data: item.state for item in await pool.items(ItemState.POISONED)}
        assert states == {"spent": ItemState.POISONED}
    versions = await sql(f'SELECT version FROM "{schema}".migrations ORDER BY version')
    assert [r[0] for r in versions] == list(range(1, SCHEMA_VERSION + 1))
    indexes = {r[0] for r in await sql("SELECT indexname FROM pg_indexes WHERE schemaname = $1", schema)}
    assert "items_claimable" in indexes and "items_ready" not in indexes


@pytest.mark.asyncio
async def test_a_schema_from_a_newer_version_is_refused_and_left_alone(url: str, schema: str) -> None:
    async with workhive.open(url) as hive:
        await hive.pool("jobs").push("kept")
    await sql(f'INSERT INTO "{schema}".migrations (version) VALUES ($1)', SCHEMA_VERSION + 1)
    err = await open_error(with_password(url))
    assert isinstance(err, SchemaVersionError)
    assert "127.0.0.1:5432/test" in str(err) and "upgrade" in str(err)
    rows = await sql(f'SELECT payload FROM "{schema}".items')
    assert [r[0] for r in rows] == ['"kept"']


@pytest.mark.asyncio
async def test_a_schema_that_belongs_to_something_else_is_refused_and_left_alone(url: str, schema: str) -> None:
    await sql(f'CREATE SCHEMA "{schema}"')
    await sql(f'CREATE TABLE "{schema}".orders (id int)')
    err = await open_error(with_password(url))
    assert isinstance(err, StorageUnavailable)
    assert "not workhive's" in str(err) and "?schema=" in str(err) and "127.0.0.1:5432/test" in str(err)
    tables = {r[0] for r in await sql("SELECT tablename FROM pg_tables WHERE schemaname = $1", schema)}
    assert tables == {"orders"}
