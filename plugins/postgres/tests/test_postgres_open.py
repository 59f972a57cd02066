"""Opening a hive: the schema it creates and versions, and every kind of bad input, never showing the password."""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
import subprocess
import sys
from typing import Any

import asyncpg
import postgres_server
import pytest

import workhive
from workhive.errors import (
    ConfigError,
    HiveNotFound,
    InvalidItem,
    InvalidName,
    SchemaVersionError,
    StorageUnavailable,
    WorkhiveError,
)
from workhive.models import ItemState
from workhive.testing.processes import free_port
from workhive_postgres import PostgresStorage, parse_url
from workhive_postgres.failures import open_failure
from workhive_postgres.schema import SCHEMA_VERSION
from workhive_postgres.sqlfiles import migrations

SECRET = "pw-s3cr3t-never-shown"


def with_password(url: str) -> str:
    # The shared test server trusts local connections: any password is accepted.
    return url.replace("postgresql://postgres@", f"postgresql://postgres:{SECRET}@")


async def sql(query: str, *args: Any) -> Any:
    conn = await asyncpg.connect(postgres_server.SERVER)
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
    storage = PostgresStorage(url, **options)
    assert_secret_free(repr(storage), storage.url, storage.config)
    with pytest.raises(WorkhiveError) as info:
        await storage.open()
    assert_secret_free(str(info.value), repr(info.value), info.value.args)
    return info.value


# -- the schema ---------------------------------------------------------------------
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
async def test_create_false_on_a_missing_schema_is_hive_not_found_and_creates_nothing(url: str, schema: str) -> None:
    err = await open_error(with_password(url), create=False)
    assert isinstance(err, HiveNotFound)
    assert "127.0.0.1:5432/test" in str(err) and schema in str(err)
    assert not await schema_exists(schema)


@pytest.mark.asyncio
async def test_create_false_opens_an_existing_hive(url: str) -> None:
    async with workhive.open(url) as hive:
        await hive.pool("jobs").push(1)
    async with workhive.open(url, create=False) as hive:
        assert (await hive.pool("jobs").stats()).pending == 1


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
    assert [r[0] for r in versions] == [1, 2, 3] == list(range(1, SCHEMA_VERSION + 1))
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


# -- unreachable servers, bad credentials, bad names ----------------------------------------
@pytest.mark.asyncio
async def test_connection_refused_names_the_server_and_not_the_password(schema: str) -> None:
    port = free_port()
    err = await open_error(f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/test?schema={schema}")
    assert isinstance(err, StorageUnavailable)
    assert f"127.0.0.1:{port}/test" in str(err) and "running" in str(err)


@pytest.mark.asyncio
async def test_unknown_host_names_the_server(schema: str) -> None:
    err = await open_error(f"postgresql://postgres:{SECRET}@no-such-host.invalid:5432/test?schema={schema}")
    assert isinstance(err, StorageUnavailable)
    assert "no-such-host.invalid:5432/test" in str(err)


@pytest.mark.asyncio
async def test_a_server_that_does_not_answer_times_out_naming_it(schema: str) -> None:
    # A listening socket that never speaks: the connect handshake waits, then times out.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        port = silent.getsockname()[1]
        err = await open_error(
            f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/test?schema={schema}&connect_timeout=0.5"
        )
    assert isinstance(err, StorageUnavailable)
    assert f"127.0.0.1:{port}/test" in str(err) and "connect_timeout" in str(err)


@pytest.mark.asyncio
async def test_a_missing_database_is_named_with_what_to_do(schema: str) -> None:
    err = await open_error(f"postgresql://postgres:{SECRET}@127.0.0.1:5432/no_such_db_wh?schema={schema}")
    assert isinstance(err, StorageUnavailable)
    assert "no_such_db_wh" in str(err) and "createdb" in str(err)


def test_a_refused_password_says_so_without_showing_it() -> None:
    # The shared server trusts local users, so the server's refusal is built here.
    config = parse_url(f"postgresql://app:{SECRET}@db.example:6543/jobs")
    err = open_failure(config, asyncpg.exceptions.InvalidPasswordError("password authentication failed"))
    assert "db.example:6543/jobs" in str(err) and "password" in str(err) and "app" in str(err)
    assert_secret_free(str(err), repr(err))


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        (f"postgresql://u:{SECRET}@h/db?schema=Bad-Name", "schema"),
        (f"postgresql://u:{SECRET}@h/db?schema=x;drop", "schema"),
        (f"postgresql://u:{SECRET}@h/db?schema=pg_catalog", "schema"),
        (f"postgresql://u:{SECRET}@h/db?nope=1", "unknown option"),
        (f"postgresql://u:{SECRET}@h:99999/db", "port"),
        (f"postgresql://u:{SECRET}@/db", "host"),
        (f"postgresql://u:{SECRET}@h/", "database"),
        (f"postgresql://u:{SECRET}@h/db?pool_size=0", "pool_size"),
        (f"mysql://u:{SECRET}@h/db", "not a PostgreSQL URL"),
    ],
)
def test_malformed_urls_are_config_errors_that_never_echo_the_password(url: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        PostgresStorage(url)
    assert fragment in str(info.value)
    assert_secret_free(str(info.value), repr(info.value))


def test_both_schemes_and_the_redacted_form() -> None:
    cfg = parse_url(f"postgres://app:{SECRET}@db.example/jobs?schema=hive_1")
    assert (cfg.host, cfg.port, cfg.database, cfg.schema) == ("db.example", 5432, "jobs", "hive_1")
    assert cfg.password == SECRET
    assert cfg.redacted == "postgresql://app:***@db.example:5432/jobs?schema=hive_1"
    assert_secret_free(repr(cfg), cfg.redacted, repr(PostgresStorage(f"postgres://app:{SECRET}@db/jobs")))


# -- bad data: refused whole, nothing stored ---------------------------------------------
@pytest.mark.asyncio
async def test_a_dedup_key_too_large_for_an_index_row_is_refused_and_nothing_stored(url: str) -> None:
    async with workhive.open(with_password(url)) as hive:
        pool = hive.pool("jobs")
        await pool.push("before")
        # 1,000 characters (the facade's limit) of 4 bytes each, incompressible: past
        # the ~2.7 KB a btree index row may hold.
        rng = random.Random(7)
        key = "".join(chr(rng.randint(0x10000, 0x1FFFF)) for _ in range(1000))
        with pytest.raises(InvalidItem) as info:
            await pool.push_many([workhive.Job("x"), workhive.Job("big", dedup_key=key)])
        assert "too large" in str(info.value) and "127.0.0.1:5432/test" in str(info.value)
        assert_secret_free(str(info.value))
        stats = await pool.stats()
        assert stats.total == 1


@pytest.mark.asyncio
async def test_pool_names_full_of_quotes_and_semicolons_are_refused_before_the_server(url: str) -> None:
    async with workhive.open(url) as hive:
        for name in ["x'; DROP TABLE items; --", 'a"b', "a;b"]:
            with pytest.raises(InvalidName):
                await hive.pool(name).push(1)
        assert await hive.pools() == []


@pytest.mark.asyncio
async def test_an_error_text_with_nul_is_kept_readable(url: str) -> None:
    async with workhive.open(url) as hive:
        pool = hive.pool("jobs")
        await pool.push(1)
        item = await pool.claim("w")
        assert item is not None
        await pool.fail(item, "bad\x00byte", retry_in=0.0)
        stored = await pool.get(item.id)
        assert stored.state is ItemState.PENDING and stored.error == "bad\ufffdbyte"


# -- the CLI against PostgreSQL -------------------------------------------------------------
def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "workhive", *args], capture_output=True, text=True, timeout=120, env=env
    )


def test_cli_commands_work_unchanged_and_never_print_the_password(url: str, tmp_path: Any) -> None:
    secret_url = with_password(url)
    env = {**os.environ, "WORKHIVE_STORAGE": secret_url}
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps({"n": i}) + "\n" for i in range(3)))
    runs = [
        cli("push", "jobs", str(items), env=env),
        cli("status", env=env),
        cli("status", "--json", env=env),
        cli("config", env=env),
        cli("config", "--json", env=env),
        cli("workers", env=env),
        cli("dead", "jobs", env=env),
    ]
    for run in runs:
        assert run.returncode == 0, (run.args, run.stdout, run.stderr)
        assert_secret_free(run.stdout, run.stderr)
    assert '"pending": 3' in runs[2].stdout.replace(" ", "").replace('"pending":3', '"pending": 3')
    assert "postgres:***@" in runs[3].stdout


def test_cli_on_an_unreachable_server_is_one_clear_line_without_the_password(schema: str) -> None:
    port = free_port()
    env = {**os.environ, "WORKHIVE_STORAGE": f"postgresql://postgres:{SECRET}@127.0.0.1:{port}/test?schema={schema}"}
    run = cli("status", env=env)
    assert run.returncode != 0
    assert f"127.0.0.1:{port}/test" in run.stderr
    assert "Traceback" not in run.stderr
    assert_secret_free(run.stdout, run.stderr)


@pytest.mark.asyncio
async def test_a_session_the_server_ends_while_the_hive_opens_is_opened_again(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A fleet's connections killed during its start-up (a chaos test, a failover): opening
    tries again within retry_for instead of failing the process with a driver error."""
    from workhive_postgres import backend

    real = backend.ensure_schema
    calls: list[int] = []

    async def ended_once(conn, cfg, *, create):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 1:
            conn.terminate()  # the server's side of it: the session is gone mid-open
            raise asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation")
        return await real(conn, cfg, create=create)

    monkeypatch.setattr(backend, "ensure_schema", ended_once)
    async with workhive.open(url) as hive:
        await hive.pool("jobs").push("still fine")
        assert (await hive.pool("jobs").stats()).pending == 1
    assert len(calls) == 2


@pytest.mark.asyncio
async def test_a_session_ended_on_every_try_gives_up_within_retry_for_naming_the_server(
    schema: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workhive_postgres import backend

    async def always_ended(conn, cfg, *, create):  # type: ignore[no-untyped-def]
        raise asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed in the middle of operation")

    monkeypatch.setattr(backend, "ensure_schema", always_ended)
    hive = workhive.open(postgres_server.url_for(schema) + "&retry_for=0.3")
    with pytest.raises(StorageUnavailable, match=r"127\.0\.0\.1:5432"):
        await hive.open()


# -- passwords with raw reserved characters, options given twice (issue 24) -------------------
RESERVED = ["@", "?", "#", "/", ":"]


def canary(char: str) -> str:
    """A password whose every piece carries the canary, so any fragment that shows is caught."""
    return f"ssCANARY1{char}ssCANARY2{char}ssCANARY3"


def assert_no_canary(*texts: object) -> None:
    for text in texts:
        assert "CANARY" not in str(text), f"a piece of the password leaked into: {text}"


@pytest.mark.parametrize("char", RESERVED)
def test_config_errors_never_show_a_piece_of_a_password_with_reserved_characters(char: str) -> None:
    from workhive_postgres import PostgresLocks

    password = canary(char)
    for url in (
        f"postgresql://app:{password}@db.example:5432/jobs?nope=1",
        f"postgresql://app:{password}@db.example:5432/jobs?schema=Bad-Name",
        f"postgresql://app:{password}@db.example:5432/jobs?schema=a&schema=b",
        f"postgresql://app:{password}@db.example:99999/jobs",
        f"postgres://app:{password}@db.example/",
    ):
        for make in (PostgresStorage, PostgresLocks, parse_url, lambda u: workhive.open(u)):
            with pytest.raises(ConfigError) as info:
                make(url)
            assert_no_canary(str(info.value), repr(info.value), repr(vars(info.value)))


@pytest.mark.parametrize("char", ["?", "#", "/"])
@pytest.mark.asyncio
async def test_a_password_that_would_be_read_as_host_port_or_database_is_refused(char: str, schema: str) -> None:
    # Read as urlsplit reads it, postgresql://app:5432/ssCANARY1#…@host/db is host "app", port 5432,
    # database "ssCANARY1": a connection somewhere else, and a message naming a piece of the password.
    url = f"postgresql://app:5432{char}ssCANARY1#ssCANARY2@127.0.0.1:5432/test?schema={schema}"
    with pytest.raises(ConfigError, match="Percent-encode") as info:
        async with workhive.open(url) as hive:
            await hive.pool("jobs").push("x")
    assert_no_canary(str(info.value), repr(vars(info.value)))
    assert "127.0.0.1:5432/test" in str(info.value)  # the rest of the URL is still shown
    assert not await schema_exists(schema)


@pytest.mark.parametrize("char", ["@", ":"])
@pytest.mark.asyncio
async def test_a_raw_at_sign_or_colon_in_the_password_is_read_whole(char: str, schema: str) -> None:
    cfg = parse_url(f"postgresql://postgres:{canary(char)}@127.0.0.1:5432/test?schema={schema}")
    assert (cfg.password, cfg.where, cfg.user) == (canary(char), "127.0.0.1:5432/test", "postgres")
    # The shared server trusts local users, so any password opens it: the host was read right.
    async with workhive.open(f"postgresql://postgres:{canary(char)}@127.0.0.1:5432/test?schema={schema}") as hive:
        await hive.pool("jobs").push("x")
        assert_no_canary(repr(hive.storage), hive.storage.url)  # type: ignore[attr-defined]
    port = free_port()
    err = await open_error(f"postgresql://postgres:{canary(char)}@127.0.0.1:{port}/test?schema={schema}")
    assert isinstance(err, StorageUnavailable)
    assert_no_canary(str(err), repr(err), repr(vars(err)))


@pytest.mark.parametrize(
    "query", ["schema={a}&schema={b}", "schema={a}&pool_size=1&pool_size=2", "schema={a}&retry_for=1&retry_for=1"]
)
@pytest.mark.asyncio
async def test_an_option_given_twice_is_refused_naming_it_and_nothing_is_created(query: str) -> None:
    from workhive_postgres import PostgresLocks

    a, b = postgres_server.schema_for(f"{query}-a"), postgres_server.schema_for(f"{query}-b")
    url = postgres_server.url_for(a).split("?")[0] + "?" + query.format(a=a, b=b)
    name = query.split("&")[-1].split("=")[0]
    with pytest.raises(ConfigError, match=f"gives '{name}' twice: give each option once"):
        async with workhive.open(url) as hive:
            await hive.pool("jobs").push("x")
    with pytest.raises(ConfigError, match=f"'{name}' twice"):
        locks = PostgresLocks(url)
        try:
            await locks.release(await locks.acquire("l", timeout=0, worker_id="w"))
        finally:
            await locks.close()
    assert not await schema_exists(a) and not await schema_exists(b)


@pytest.mark.parametrize("char", RESERVED)
def test_the_cli_shows_no_piece_of_the_password(char: str, schema: str, tmp_path: Any) -> None:
    url = f"postgresql://postgres:{canary(char)}@127.0.0.1:5432/test?schema={schema}"
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("WORKHIVE_")}, "WORKHIVE_STORAGE": url}
    items = tmp_path / "items.jsonl"
    items.write_text('{"n": 1}\n')
    runs = [cli("config", env=env), cli("push", "jobs", str(items), env=env), cli("status", "--json", env=env)]
    for run in runs:
        assert_no_canary(run.stdout, run.stderr)
        assert "Traceback" not in run.stderr
    assert runs[0].returncode == 0, runs[0].stderr
    for run in runs[1:]:
        if char in "/?#":
            assert run.returncode != 0 and "Percent-encode" in run.stderr, run.stderr
        else:
            assert run.returncode == 0, run.stderr
