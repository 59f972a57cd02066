"""Opening a hive: URL forms and options, create=False, bad input and names, the CLI; the password never shown."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

import postgres_server
import pytest
from postgres_server import SECRET, assert_secret_free, open_error, schema_exists, with_password

import workhive
from workhive.errors import (
    ConfigError,
    HiveNotFound,
    InvalidName,
    StorageUnavailable,
)
from workhive.testing.environment import workhive_free_env
from workhive.testing.processes import free_port
from workhive_postgres import PostgresStorage, parse_url


# -- create=False -------------------------------------------------------------------
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


# -- bad URLs and names --------------------------------------------------------------------
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


# -- bad names: refused whole, nothing stored ---------------------------------------------
@pytest.mark.asyncio
async def test_pool_names_full_of_quotes_and_semicolons_are_refused_before_the_server(url: str) -> None:
    async with workhive.open(url) as hive:
        for name in ["x'; DROP TABLE items; --", 'a"b', "a;b"]:
            with pytest.raises(InvalidName):
                await hive.pool(name).push(1)
        assert await hive.pools() == []


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
    env = workhive_free_env(WORKHIVE_STORAGE=url)
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


# -- behind PgBouncer ------------------------------------------------------------------
def test_pgbouncer_options_parse_and_show_where_listen_and_locks_connect() -> None:
    cfg = parse_url(
        f"postgresql://app:{SECRET}@bouncer:6432/jobs?schema=hive&pgbouncer=transaction&direct_host=db&direct_port=5433"
    )
    assert (cfg.pgbouncer, cfg.transaction_pooled, cfg.sessions_reach_server) == ("transaction", True, True)
    assert cfg.connect_kwargs()["statement_cache_size"] == 0 and cfg.connect_kwargs()["port"] == 6432
    direct = cfg.direct()
    assert (direct.where, direct.pgbouncer, direct.password) == ("db:5433/jobs", None, SECRET)
    assert "statement_cache_size" not in direct.connect_kwargs()  # PostgreSQL itself keeps prepared statements
    assert cfg.redacted == (
        "postgresql://app:***@bouncer:6432/jobs?schema=hive&pgbouncer=transaction&direct_host=db&direct_port=5433"
    )
    assert_secret_free(cfg.redacted, repr(cfg))
    alone = parse_url("postgresql://app@bouncer:6432/jobs?pgbouncer=transaction")
    assert not alone.sessions_reach_server and alone.direct() is alone
    session = parse_url("postgresql://app@bouncer:6432/jobs?pgbouncer=session")
    assert session.sessions_reach_server and "statement_cache_size" not in session.connect_kwargs()
    assert "statement_cache_size" not in parse_url("postgresql://app@db/jobs").connect_kwargs()


@pytest.mark.parametrize(
    ("query", "said"),
    [
        ("pgbouncer=statement", "pgbouncer=transaction or pgbouncer=session"),
        ("pgbouncer=", "pgbouncer=transaction or pgbouncer=session"),
        ("direct_host=db", "give them with ?pgbouncer=transaction"),
        ("pgbouncer=transaction&direct_port=5433", "direct_port= without direct_host="),
        ("pgbouncer=transaction&direct_host=", "direct_host= is empty"),
        ("pgbouncer=transaction&direct_host=db&direct_port=70000", "not a TCP port"),
        ("pgbouncer=transaction&direct_host=db&direct_port=x", "direct_port="),
        ("statement_cache_size=0", "?pgbouncer=transaction"),
    ],
)
def test_bad_pgbouncer_options_are_config_errors_saying_what_to_write(query: str, said: str) -> None:
    with pytest.raises(ConfigError) as info:
        PostgresStorage(f"postgresql://app:{SECRET}@bouncer:6432/jobs?{query}")
    assert said in str(info.value)
    assert_secret_free(str(info.value))
