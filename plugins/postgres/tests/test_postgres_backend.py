"""Mechanisms of the PostgreSQL backend the contract cannot see: deadlock retries, the listener, SQL files."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import asyncpg
import postgres_server
import pytest
from postgres_buffers import claim_buffers

import workhive
from workhive.errors import OutcomeUnknown
from workhive.ids import item_number
from workhive.models import Ack, ItemState
from workhive.testing.clock import ManualClock
from workhive_postgres import PostgresStorage
from workhive_postgres.sqlfiles import migrations, queries, with_limit
from workhive_postgres.sqlfiles import statements as schema_statements


async def wait_until(check: Any, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        assert time.monotonic() < deadline, f"gave up waiting for {what}"
        await asyncio.sleep(0.02)


@pytest.mark.asyncio
async def test_a_fused_complete_and_claim_that_meets_a_deadlock_is_run_again_and_counted(url: str, schema: str) -> None:
    """A real deadlock: our statement holds the item's row lock and waits for a lock another
    session holds, while that session waits for our row. The server aborts ours (it has the
    shorter deadlock_timeout); the backend runs it again once the other side is gone."""
    admin = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    side = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            storage = hive.storage
            assert isinstance(storage, PostgresStorage)
            pool = hive.pool("jobs")
            first_id, second_id = await pool.push_many(["a", "b"])
            first = await pool.claim("w1")
            assert first is not None and first.id == first_id
            # Completing an item takes advisory lock 7001 inside the statement (a test-only trigger).
            await admin.execute(
                """CREATE FUNCTION block_on_done() RETURNS trigger LANGUAGE plpgsql AS $$
                BEGIN
                    IF NEW.state = 'done' THEN PERFORM pg_advisory_xact_lock(7001); END IF;
                    RETURN NEW;
                END $$;
                CREATE TRIGGER block_on_done AFTER UPDATE ON items FOR EACH ROW EXECUTE FUNCTION block_on_done();"""
            )
            await side.execute("SET deadlock_timeout = '60s'")
            await side.execute("BEGIN")
            await side.execute("SELECT pg_advisory_xact_lock(7001)")
            before = storage.conflicts_retried
            fused = asyncio.create_task(pool.complete_and_claim(first, "r", "w1"))

            async def ours_waits() -> bool:
                rows = await admin.fetch(
                    "SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND objid = 7001 AND NOT granted"
                )
                return bool(rows)

            await wait_until(ours_waits, "the fused statement to wait for the advisory lock")
            # The other side now wants the row the fused statement holds: a cycle.
            side_update = asyncio.create_task(
                side.execute("UPDATE items SET priority = priority WHERE id = $1", int(first_id[1:], 16))
            )
            await asyncio.wait_for(side_update, 60)  # ours was aborted, so the row came free
            await side.execute("COMMIT")
            second = await asyncio.wait_for(fused, 60)
            # At least once: if the retry wins the row back before the other side, the cycle repeats.
            assert storage.conflicts_retried > before
            assert second is not None and second.id == second_id
            done = await pool.get(first_id)
            assert done.state is ItemState.DONE and done.result == "r"
    finally:
        await side.close()
        await admin.close()


@pytest.mark.asyncio
async def test_the_listening_connection_comes_back_after_the_server_drops_it(url: str) -> None:
    async with workhive.open(url) as hive, workhive.open(url) as pusher:
        storage = hive.storage
        assert isinstance(storage, PostgresStorage)
        pool = hive.pool("jobs")
        await pool.wait_for_work(0)  # starts listening
        listener = storage._listener
        assert listener is not None
        old_pid = listener.get_server_pid()
        admin = await asyncpg.connect(postgres_server.SERVER)
        try:
            assert await admin.fetchval("SELECT pg_terminate_backend($1)", old_pid)
        finally:
            await admin.close()

        async def dropped() -> bool:
            return storage._listener is None or storage._listener.is_closed()

        await wait_until(dropped, "the dropped listener to be noticed")
        waiter = asyncio.create_task(pool.wait_for_work(600))

        async def listening_again() -> bool:
            current = storage._listener
            return current is not None and not current.is_closed() and current.get_server_pid() != old_pid

        await wait_until(listening_again, "a new listening connection")
        await pusher.pool("jobs").push("wake")
        await asyncio.wait_for(waiter, 60)  # woken by the push, not by the 600 s timeout
        assert await pool.claim("w1") is not None


def test_every_statement_comes_from_the_sql_files() -> None:
    names = set(queries())
    assert {"claim", "complete_one", "complete_many", "complete_and_claim", "push", "fail", "release"} <= names
    assert all(text and not text.rstrip().endswith(";") for text in queries().values())
    assert {"try_lock", "wait_lock", "record_holder", "holders"} <= set(queries("locks.sql"))
    assert [v for v, _ in migrations()] == list(range(1, len(migrations()) + 1))


@pytest.mark.asyncio
async def test_a_large_push_goes_by_copy_and_keeps_order_options_and_wake_ups(url: str) -> None:
    from workhive_postgres.backend import COPY_FROM

    async with workhive.open(url) as hive, workhive.open(url) as other:
        pool = hive.pool("big")
        n = COPY_FROM + 500
        waiter = asyncio.create_task(other.pool("big").wait_for_work(600))
        await asyncio.sleep(0.2)
        jobs = [
            workhive.Job({"i": i}, priority=1 if i == n - 1 else 0, delay=3600.0 if i == 0 else 0.0) for i in range(n)
        ]
        ids = await pool.push_many(jobs)
        await asyncio.wait_for(waiter, 60)  # woken by the push
        assert len(set(ids)) == n and ids == sorted(ids)
        first = await pool.get(ids[0])
        assert first.available_at == first.created_at + 3600.0
        stats = await pool.stats()
        assert (stats.pending, stats.delayed) == (n - 1, 1)
        top = await pool.claim("w")
        assert top is not None and top.id == ids[-1] and top.data == {"i": n - 1}
        nxt = await pool.claim("w")
        assert nxt is not None and nxt.id == ids[1] and nxt.data == {"i": 1}
        assert await hive.pools() == ["big"]


@pytest.mark.asyncio
async def test_a_lock_created_by_another_session_at_the_same_moment_is_taken_not_an_error(schema: str) -> None:
    """Two processes take a new lock at once. The second one's insert of the lock's row waits
    for the first one's, then does nothing, and a look-up in that same statement cannot see
    the row (its snapshot is older): the id came back NULL and taking the lock failed
    with a TypeError (seen as a retried item in the fleet matrix)."""
    from workhive_postgres import PostgresLocks
    from workhive_postgres.locks import _encode

    locks = PostgresLocks(postgres_server.url_for(schema))
    first = await locks.acquire("warm-up", ttl=None, timeout=0)  # creates the schema and its tables
    await locks.release(first)
    side = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    # Watched from a third session: inside side's transaction pg_stat_activity would be read
    # once and then served from that transaction's snapshot, never showing the wait.
    watch = await asyncpg.connect(postgres_server.SERVER)
    try:
        name_hash, raw = _encode("fresh")
        tx = side.transaction()
        await tx.start()
        await side.execute("INSERT INTO locks (name_hash, name) VALUES ($1, $2)", name_hash, raw)
        taking = asyncio.create_task(locks.acquire("fresh", ttl=None, timeout=60))

        async def taker_waits_for_the_insert() -> bool:
            rows = await watch.fetch(
                "SELECT 1 FROM pg_stat_activity"
                " WHERE $1 = ANY(pg_blocking_pids(pid)) AND query LIKE '%INSERT INTO %locks (name_hash%'",
                side.get_server_pid(),
            )
            return bool(rows)

        await wait_until(taker_waits_for_the_insert, "the other session's insert to wait for ours")
        await tx.commit()
        held = await asyncio.wait_for(taking, 60)
        assert held.name == "fresh" and held.token == 1
        await locks.release(held)
    finally:
        await watch.close()
        await side.close()
        await locks.close()


@pytest.mark.asyncio
async def test_statements_on_one_claim_find_it_by_primary_key_never_by_walking_the_lease_index(
    url: str, schema: str
) -> None:
    """The lease index keeps an entry for every claim until vacuum; a completion that reads it walks them all.

    With statistics taken while nothing was claimed, the planner would pick that index for
    `pool = … AND state = 'claimed' AND lease_expires_at > …`; each statement must look the
    item up by id whatever the statistics say.
    """
    conn = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            await pool.push_many([{"n": i} for i in range(2000)])
            await conn.execute("ANALYZE items")  # every item pending: the statistics see no lease held
            claimed = await pool.claim_many(100, "w1")
            ids = [item_number(item.id) for item in claimed]
            tokens = [item.token for item in claimed]
            q = schema_statements(schema)
            statements = {
                "complete_one": (0.0, "jobs", ids[0], tokens[0], "r"),
                "complete_many": (0.0, "jobs", ids, tokens, ["r"] * len(ids)),
                "complete_and_claim": (0.0, "jobs", ids[0], tokens[0], "r", "w1", 60.0),
                "fail": (0.0, ids[0], "jobs", tokens[0], "boom", 1.0, False),
                "release": (0.0, ids[0], "jobs", tokens[0], 0.0),
                "extend": (0.0, ids[0], "jobs", tokens[0], 60.0),
            }
            for name, args in statements.items():
                text = with_limit(q[name], 1) if name == "complete_and_claim" else q[name]
                plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + text, *args))
                assert "items_leases" not in plan, (name, plan)
                if name != "complete_many":  # on a table this small a batch may read it whole: also fine
                    assert "items_pkey" in plan, (name, plan)
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_claims_read_the_claimable_index_and_their_rows_by_primary_key_in_every_plan(
    url: str, schema: str
) -> None:
    """A claim reads the head of items_claimable and updates its rows by id, never scanning the table.

    Prepared statements run generic plans after five executions. Written as a join,
    the claim's generic plan (costed before the limit was written into the text) guessed
    a tenth of the index and hashed the whole table for every claim. Checked with
    statistics of a large pending backlog, with both plan kinds and two limits.
    """
    conn = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            await pool.push_many([{"n": i} for i in range(5000)])
            held = await pool.claim("w1")
            assert held is not None
            await conn.execute("ANALYZE items")
            q = schema_statements(schema)
            statements = {
                "claim": (0.0, "jobs", "w1", 60.0),
                "complete_and_claim": (0.0, "jobs", item_number(held.id), held.token, "r", "w1", 60.0),
            }
            for mode in ("force_custom_plan", "force_generic_plan"):
                await conn.execute(f"SET plan_cache_mode = {mode}")
                for (name, args), limit in itertools.product(statements.items(), (1, 100)):
                    text = with_limit(q[name], limit)
                    plan = "\n".join(r[0] for r in await conn.fetch("EXPLAIN " + text, *args))
                    assert "Seq Scan" not in plan and "Hash" not in plan, (mode, name, plan)
                    assert "items_claimable" in plan and "items_pkey" in plan, (mode, name, plan)
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_claims_keep_their_generic_plan_once_the_table_is_analyzed(url: str, schema: str) -> None:
    """With statistics of a large backlog, repeated claims run PostgreSQL's cached generic plan.

    Written as ``LIMIT $n``, a generic plan is costed as if it took a tenth of the
    backlog, so PostgreSQL planned every claim afresh (a custom plan per call, most of
    the claim's server time). The limit is written in as a number; checked on the
    server's own count of plans for the statements this backend prepared.
    """
    async with workhive.open(url.replace("?", "?pool_size=1&")) as hive:
        pool = hive.pool("jobs")
        for start in range(0, 20_000, 10_000):
            await pool.push_many([{"n": i} for i in range(start, start + 10_000)])
        await pool.claim_many(20, "holder", lease=600)  # leases held ahead of the backlog in the index
        await hive.storage.now()  # settles the pool's one connection
        admin = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
        try:
            await admin.execute("ANALYZE items")
        finally:
            await admin.close()
        for _ in range(20):
            item = await pool.claim("w1")
            assert item is not None
            await pool.complete(item, "ok")
            taken = await pool.claim_many(4, "w1")
            await pool.complete_many([(each, "ok") for each in taken])
        item = await pool.claim("w1")
        for _ in range(20):
            item = await pool.complete_and_claim(item, "ok", "w1")
        storage = hive.storage
        assert isinstance(storage, PostgresStorage)
        conn = await storage._pool.acquire()  # the one connection every call above ran on
        try:
            rows = await conn.fetch("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        finally:
            storage._pool.release(conn)
        counts = {r[0]: (r[1], r[2]) for r in rows}
        q = schema_statements(schema)
        for name, limit in (("claim", 1), ("claim", 4), ("complete_and_claim", 1)):
            generic, custom = counts[with_limit(q[name], limit)]
            # PostgreSQL plans a prepared statement afresh five times, then keeps the generic plan.
            assert custom <= 5 and generic >= 14, (name, limit, generic, custom)


@pytest.mark.asyncio
@pytest.mark.parametrize("fused", [False, True], ids=["claim", "complete_and_claim"])
async def test_a_claim_whose_connection_drops_after_it_ran_is_reported_unknown_not_run_again(
    url: str, fused: bool
) -> None:
    """A claim that went through but whose answer was lost took items for the worker that it never
    saw; run again, it would take more while heartbeats keep the first ones claimed forever. The
    caller learns ``OutcomeUnknown`` instead, and the items stay findable under the worker's id."""
    async with workhive.open(url) as hive:
        storage = hive.storage
        assert isinstance(storage, PostgresStorage)
        ids = await hive.pool("drops").push_many([{"n": n} for n in range(4)])
        held = None
        if fused:
            (held,) = await storage.claim("drops", "w1", 1, 60.0)
        real = storage._complete_and_claim if fused else storage._claim

        async def then_drop(conn: Any, *args: Any) -> Any:
            answer = await real(conn, *args)  # applied (autocommit)...
            await conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")  # ...and the answer is lost
            return answer

        if fused:
            storage._complete_and_claim = then_drop  # type: ignore[method-assign]
            with pytest.raises(OutcomeUnknown):
                await storage.complete_and_claim("drops", Ack(held.id, held.token, None), "w1", 1, 60.0)
        else:
            storage._claim = then_drop  # type: ignore[method-assign]
            with pytest.raises(OutcomeUnknown):
                await storage.claim("drops", "w1", 1, 60.0)
        claimed = await storage.list_items("drops", ItemState.CLAIMED, 10)
        assert len(claimed) == 1, claimed  # exactly what the lost statement took: nothing ran twice
        assert {i.id for i in claimed} <= set(ids)
        # The worker gives back what it holds (what the runtime does after an unknown claim).
        assert await storage.release_by_worker("drops", "w1", False) == 1
        assert await storage.list_items("drops", ItemState.CLAIMED, 10) == []


async def _claim_buffers(conn: Any, schema: str, offset: float, *, from_the_bottom: bool) -> int:
    """Buffers one claim of one item reads and writes, rolled back (postgres_buffers.claim_buffers).

    ``from_the_bottom``: with the marks deleted first, so every band is read from its
    first entry, as claims read them before migration 0005.
    """
    text = with_limit(schema_statements(schema)["claim"], 1)
    args = (offset, "jobs", "probe", 60.0)
    return await claim_buffers(conn, text, *args, marks="claim_marks", from_the_bottom=from_the_bottom)


@pytest.mark.asyncio
async def test_under_a_held_vacuum_horizon_a_claim_reads_as_much_after_many_items_as_after_few(
    url: str, schema: str
) -> None:
    """Migration 0005: while a session idles in a transaction, every version items pass
    through stays in items_claimable (vacuum may not remove them, scans may not mark them
    dead). A claim starts each band at its mark, past them: it reads the same number of
    buffers after 1,600 items as after 200. Read from the bottom (the marks deleted, as
    claims read before version 5) the same claim reads more the more items went through,
    which shows the horizon really is held."""
    clock = ManualClock()
    pin = await asyncpg.connect(postgres_server.SERVER)
    conn = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url, clock_offset=clock.offset) as hive:
            storage = hive.storage
            assert isinstance(storage, PostgresStorage)
            storage.marks_every = 0.0  # marks move before every claim
            pool = hive.pool("jobs")
            await pool.push_many([{"n": i} for i in range(50)])  # a backlog that stays 50 long
            await pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            await pin.fetchval("SELECT txid_current()")  # holds the horizon until it ends
            measured: dict[int, tuple[int, int]] = {}
            through = 0
            for target in (200, 1600):
                while through < target:
                    taken = await pool.claim_many(50, "w1")
                    assert len(taken) == 50
                    assert all(await pool.complete_many([(item, "ok") for item in taken]))
                    await pool.push_many([{"n": through + i} for i in range(50)])
                    through += 50
                # Past the marks' lag, then one claim moves them to the head of the backlog.
                clock.advance(5)
                item = await pool.claim("w1")
                assert item is not None
                await pool.complete(item, "ok")
                await pool.push({"n": "refill"})
                measured[target] = (
                    await _claim_buffers(conn, schema, clock.offset(), from_the_bottom=False),
                    await _claim_buffers(conn, schema, clock.offset(), from_the_bottom=True),
                )
            (marked_few, bottom_few), (marked_many, bottom_many) = measured[200], measured[1600]
            # From the bottom: the dead entries of 1,400 more items are walked (two per item,
            # a heap page per few dozen): far more than a btree growing a level could add.
            assert bottom_many - bottom_few >= 30, measured
            # From the marks: nothing grows with the items that went through.
            assert marked_many - marked_few <= 6, measured
            assert marked_many < bottom_many, measured
    finally:
        await pin.close()
        await conn.close()


_INSERT_PENDING = (
    "INSERT INTO items (pool, payload, state, priority, max_attempts, created_at, available_at)"
    " VALUES ('jobs', $1, 'pending', 0, 5, $2, $2)"
)


@pytest.mark.asyncio
async def test_a_mark_never_passes_the_start_of_a_transaction_writing_items(url: str, schema: str) -> None:
    """Migration 0005: an item a transaction keys at its own start may commit after a claim
    moved its band's mark. A mark stays at or below the start of every transaction holding
    a write lock on items, so the item is claimed as soon as it commits (with no lag, a mark
    would otherwise reach the claim's own time, past the item)."""
    side = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            storage = hive.storage
            assert isinstance(storage, PostgresStorage)
            storage.marks_every, storage.marks_lag = 0.0, 0.0
            pool = hive.pool("jobs")
            await pool.push("first")
            first = await pool.claim("w1")
            assert first is not None
            await pool.complete(first, "ok")
            await side.execute("BEGIN")
            await side.execute(_INSERT_PENDING, '"late"', await side.fetchval("SELECT now_s(0)"))
            assert await pool.claim("w1") is None  # not committed yet; this claim moved the mark
            low = await side.fetchval("SELECT low FROM claim_marks ORDER BY n DESC LIMIT 1")
            start = await side.fetchval("SELECT extract(epoch FROM now())::float8")
            assert low <= start
            await side.execute("COMMIT")
            late = await pool.claim("w1")
            assert late is not None and late.data == "late"
    finally:
        await side.close()


@pytest.mark.asyncio
async def test_an_item_below_its_bands_mark_is_claimed_at_the_next_sweep(url: str, schema: str) -> None:
    """Migration 0005: what a mark cannot foresee (a writer stalled longer than the lag between
    reading the clock and locking items, a server clock stepped back) can leave an item below its
    band's mark. Claims do not see it until a sweep walks the band from the bottom again, at most
    SWEEP_EVERY seconds later; then it is claimed, first, as its time says."""
    admin = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    clock = ManualClock()
    try:
        async with workhive.open(url, clock_offset=clock.offset) as hive:
            storage = hive.storage
            assert isinstance(storage, PostgresStorage)
            storage.marks_every = 0.0
            pool = hive.pool("jobs")
            await pool.push_many(["a", "b"])
            clock.advance(10)
            a = await pool.claim("w1")  # the first move sweeps, and puts the mark on "b"
            assert a is not None and a.data == "a"
            long_ago = await admin.fetchval("SELECT now_s(0) - 1000")
            await admin.execute(_INSERT_PENDING, '"below"', long_ago)
            b = await pool.claim("w1")
            assert b is not None and b.data == "b"  # "below" is hidden under the mark
            assert await pool.claim("w1") is None
            clock.advance(storage.sweep_every)
            below = await pool.claim("w1")
            assert below is not None and below.data == "below"
    finally:
        await admin.close()
