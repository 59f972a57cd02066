"""``failures.py``: unreachable servers, refused logins, sessions ended by the server, values it refuses.

Every error names the server and says what to do; none shows the password.
"""

from __future__ import annotations

import asyncio
import random
import socket

import asyncpg
import postgres_server
import pytest
from postgres_server import SECRET, assert_secret_free, open_error, with_password

import workhive
from workhive.errors import InvalidItem, StorageUnavailable
from workhive.models import ItemState
from workhive.testing.processes import free_port
from workhive_postgres import parse_url
from workhive_postgres.failures import open_failure


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
async def test_an_error_text_with_nul_is_kept_readable(url: str) -> None:
    async with workhive.open(url) as hive:
        pool = hive.pool("jobs")
        await pool.push(1)
        item = await pool.claim("w")
        assert item is not None
        await pool.fail(item, "bad\x00byte", retry_in=0.0)
        stored = await pool.get(item.id)
        assert stored.state is ItemState.PENDING and stored.error == "bad\ufffdbyte"


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


@pytest.mark.asyncio
async def test_a_statement_left_unanswered_past_command_timeout_counts_as_a_lost_connection(
    url: str, schema: str
) -> None:
    """A stalled or half-open network leaves a statement waiting forever, while the process's
    heartbeats keep its items claimed. Past ``command_timeout`` the call gives up as on a lost
    connection (its outcome unknown), instead of hanging. Here the server itself holds the
    statement back: another session locks the items table."""
    async with workhive.open(f"{url}&command_timeout=0.3&retry_for=1") as hive:
        pool = hive.pool("stalled")
        await pool.push({"n": 1})
        (item,) = await pool.claim_many(1, "w1", lease=60)
        blocker = await asyncpg.connect(**parse_url(url).connect_kwargs())
        try:
            transaction = blocker.transaction()
            await transaction.start()
            await blocker.execute(f'LOCK TABLE "{schema}".items IN ACCESS EXCLUSIVE MODE')
            try:
                with pytest.raises(StorageUnavailable):
                    # Bounded only so that the old behaviour (waiting for the lock) ends the test too.
                    await asyncio.wait_for(pool.complete(item, {"ok": True}), timeout=120)
            finally:
                await transaction.rollback()
        finally:
            await blocker.close()
        assert (await pool.get(item.id)).state is ItemState.CLAIMED  # nothing was applied; the claim stands
