"""Groups on PostgreSQL (migration 0008) beyond the contract's GR1-GR9: the ready-group
bookkeeping (``groups.live``), the switch of a pool's claims to ``claim_grouped``
when another process gives it groups, and the wait of an idle worker."""

from __future__ import annotations

import asyncio

import asyncpg
import postgres_server
import pytest
from postgres_buffers import claim_buffers

import workhive
from workhive.testing.clock import ManualClock
from workhive_postgres import PostgresStorage
from workhive_postgres.sqlfiles import statements as schema_statements
from workhive_postgres.sqlfiles import with_limit


async def _live_groups(conn: asyncpg.Connection, pool: str) -> list[str]:
    return [r[0] for r in await conn.fetch("SELECT grp FROM groups WHERE pool = $1 AND live ORDER BY grp", pool)]


@pytest.mark.asyncio
async def test_claims_visit_only_groups_with_live_items(url: str, schema: str) -> None:
    """A group whose items are all finished is dropped from the turns by the claim that finds it
    empty, so groups that are done cost later claims nothing; a push makes it live again."""
    conn = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            for n in range(20):
                await pool.push({"n": n}, group=f"t{n:02d}")
            await pool.push_many([{"big": n} for n in range(5)], group="big")
            assert len(await _live_groups(conn, "jobs")) == 21
            while (item := await pool.claim("w1")) is not None:
                await pool.complete(item, None)
            # Each emptied group was passed over once and cleared; only the ungrouped row stays.
            assert await _live_groups(conn, "jobs") == [""]
            await pool.push("again", group="t07")
            assert await _live_groups(conn, "jobs") == ["", "t07"]
            again = await pool.claim("w1")
            assert again is not None and again.group == "t07"
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_a_requeued_item_brings_its_cleared_group_back(url: str, schema: str) -> None:
    """[GR1] requeue makes a poisoned item pending again in a group the claims had dropped."""
    conn = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            item_id = await pool.push("x", group="t1")
            item = await pool.claim("w1")
            assert item is not None
            await pool.fail(item, "boom", poison=True)
            assert await pool.claim("w1") is None
            assert await _live_groups(conn, "jobs") == [""]
            assert await pool.requeue([item_id]) == 1
            assert await _live_groups(conn, "jobs") == ["", "t1"]
            back = await pool.claim("w1")
            assert back is not None and back.id == item_id and back.group == "t1"
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_a_pool_given_groups_by_another_process_is_claimed_under_its_limits(url: str) -> None:
    """[GR7] A process that has claimed a pool without groups learns, in its next claim, that another
    process set a limit: the ungrouped claim finds nothing in a pool with a group_pools row, and the
    claim goes through claim_grouped, which honours the limit."""
    async with workhive.open(url) as first, workhive.open(url) as second:
        assert isinstance(first.storage, PostgresStorage)
        pool = first.pool("jobs")
        await pool.push_many(["a", "b", "c", "d"])
        assert await pool.claim("w1") is not None  # the ungrouped claim: nothing learned about groups
        assert "jobs" not in first.storage._grouped
        await second.pool("jobs").set_limit(2)
        taken = await pool.claim_many(3, "w1")
        assert len(taken) == 1  # one more in flight: two, the pool's limit
        assert "jobs" in first.storage._grouped
        assert await pool.claim("w1") is None


@pytest.mark.asyncio
async def test_an_idle_worker_waits_for_a_paused_group_or_a_freed_slot_not_for_its_items(url: str) -> None:
    """next_due_grouped: items of a paused group are due when the pause ends, items of a group at its
    limit when its first claim in flight expires; the soonest of the groups counts."""
    async with workhive.open(url) as hive:
        storage = hive.storage
        assert isinstance(storage, PostgresStorage)
        pool = hive.pool("jobs")

        async def due() -> float | None:
            value = await storage._run("test", storage._fetchval, "next_due_grouped", 0.0, "jobs")
            return None if value is None else float(value)

        await pool.push_many(["p1", "p2"], group="paused")
        await pool.pause_group("paused", 1000)
        assert 900 < (await due() or 0) <= 1000
        await pool.push_many(["l1", "l2"], group="limited")
        await pool.set_group_limit("limited", 1)
        held = await pool.claim("w1", lease=500)
        assert held is not None and held.group == "limited"
        assert 400 < (await due() or 0) <= 500  # the slot frees at the lease's expiry, before the pause ends
        await pool.pause_group("paused", None)
        assert (await due() or 1) <= 0


@pytest.mark.asyncio
async def test_the_claim_of_a_pool_without_groups_reads_its_range_in_index_order(url: str, schema: str) -> None:
    """Ungrouped items hold grp = '' (an equality): with grp IS NULL the planner sorted every due
    entry of the band for each claim (17 ms against 0.26 ms from a 2,500-item backlog)."""
    conn = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            await hive.pool("jobs").push_many([{"n": n} for n in range(3000)])
            await conn.execute("ANALYZE items")
            q = schema_statements(schema)
            for mode in ("force_custom_plan", "force_generic_plan"):
                await conn.execute(f"SET plan_cache_mode = {mode}")
                for limit in (1, 100):
                    plan = "\n".join(
                        r[0]
                        for r in await conn.fetch("EXPLAIN " + with_limit(q["claim"], limit), 0.0, "jobs", "w1", 60.0)
                    )
                    assert "items_claimable" in plan, plan
                    assert "Sort Key: (CASE" not in plan, (mode, limit, plan)  # only the bands are sorted
    finally:
        await conn.close()


async def _vts(conn: asyncpg.Connection, pool: str) -> dict[str, float]:
    return {r[0]: r[1] for r in await conn.fetch("SELECT grp, vt FROM groups WHERE pool = $1 AND grp <> ''", pool)}


@pytest.mark.asyncio
async def test_a_claim_never_waits_for_a_group_another_claim_holds_and_owes_its_turns(url: str, schema: str) -> None:
    """Migration 0009: a claim that finds a group's row held by another claim (in flight, not
    committed) claims its items anyway, other items (SKIP LOCKED), in turns counted in this call,
    and writes the turns down as a debt; the group's next owner adds the debt to its vt. Under a
    1 ms lock_timeout, a claim that waited for any lock would fail."""
    holder = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    other = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            big = await pool.push_many([f"b{n}" for n in range(10)], group="big")
            mid = await pool.push_many([f"m{n}" for n in range(10)], group="mid")
            # The pool's first claim adds the row of its ungrouped items' turns: the next one that
            # finds it uncommitted waits (once in a pool's life).
            assert [i.id for i in await pool.claim_many(2, "w0")] == [big[0], mid[0]]
            async with holder.transaction():
                held = await holder.fetch("SELECT id, grp FROM claim_grouped(0, 'jobs', 'wA', 60, 2) ORDER BY ord")
                assert [r[1] for r in held] == ["big", "mid"]  # both rows now held until the commit
                await other.execute("SET lock_timeout = '1ms'")
                rows = await other.fetch(
                    "SELECT id, grp, taken FROM claim_grouped(0, 'jobs', 'wB', 60, 4) ORDER BY ord"
                )
                # The holder's items are locked: the next ones, still in turns.
                assert [(r[1], f"i{r[0]:016x}") for r in rows] == [
                    ("big", big[2]), ("mid", mid[2]), ("big", big[3]), ("mid", mid[3]),
                ]  # fmt: skip
                owed = await other.fetch("SELECT grp, sum(turns) FROM group_debts GROUP BY grp ORDER BY grp")
                assert [(r[0], r[1]) for r in owed] == [("big", 2.0), ("mid", 2.0)]
            assert await _vts(other, "jobs") == {"big": 2.0, "mid": 2.0}  # the first claim's and the holder's
            nxt = await pool.claim("wC")
            # Its debts folded in, each group has had four turns; ties go by name.
            assert nxt is not None and nxt.group == "big" and nxt.id == big[4]
            assert await other.fetchval("SELECT count(*) FROM group_debts") == 0
            assert await _vts(other, "jobs") == {"big": 5.0, "mid": 4.0}
    finally:
        await holder.close()
        await other.close()


@pytest.mark.asyncio
async def test_a_claim_that_meets_a_busy_group_deals_each_group_its_weighted_share(url: str, schema: str) -> None:
    """Migration 0013: a claim that finds a group's row held by another claim deals from a view of
    the vts that lags by that claim's uncommitted turns. Here big's committed vt is 20 turns of
    mid's behind, as a claim holding big's row and dealing it would leave it. Turn order alone
    (a claim that meets no busy group: rolled back) gives big all 40 turns; a claim that meets
    big busy gives each group at most its share of the turns (3:1) plus one."""
    holder = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    other = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            await pool.push_many([f"b{n}" for n in range(100)], group="big")
            await pool.push_many([f"m{n}" for n in range(100)], group="mid")
            await pool.set_group_weight("big", 3)
            assert len(await pool.claim_many(4, "w0")) == 4  # the pool's first claim adds its ungrouped row
            await other.execute("UPDATE groups SET vt = 10 WHERE pool = 'jobs' AND grp = 'big'")
            await other.execute("UPDATE groups SET vt = 30 WHERE pool = 'jobs' AND grp = 'mid'")
            claim = "SELECT grp FROM claim_grouped(0, 'jobs', 'wB', 60, 40) ORDER BY ord"
            alone = other.transaction()
            await alone.start()
            assert [r[0] for r in await other.fetch(claim)] == ["big"] * 40
            await alone.rollback()
            async with holder.transaction():
                await holder.execute("SELECT FROM groups WHERE pool = 'jobs' AND grp = 'big' FOR UPDATE")
                got = [r[0] for r in await other.fetch(claim)]
            assert (got.count("big"), got.count("mid")) == (31, 9)  # 30 + 1 and the rest
            # Whatever a claim deals is what it commits: big's debt and mid's row.
            owed = await other.fetch("SELECT grp, sum(turns) FROM group_debts GROUP BY grp")
            assert [(r[0], r[1]) for r in owed] == [("big", 31 / 3)]
            assert (await _vts(other, "jobs"))["mid"] == 39.0
    finally:
        await holder.close()
        await other.close()


@pytest.mark.asyncio
async def test_a_limit_changes_between_claims_never_during_one(url: str, schema: str) -> None:
    """[GR6, GR7] Migration 0009: a claim of a group without a limit takes no row lock the limit's
    statement would wait for, so each claim holds the pool's settings lock shared and the limit
    statements take it exclusive: a limit set while a claim is in flight waits for its commit
    (here: fails under a 1 ms lock_timeout), and is set once the claim is done."""
    holder = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    setter = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            await pool.push_many(["a", "b", "c"], group="t1")
            q = schema_statements(schema)
            await setter.execute("SET lock_timeout = '1ms'")
            async with holder.transaction():
                assert len(await holder.fetch("SELECT id FROM claim_grouped(0, 'jobs', 'wA', 60, 1)")) == 1
                for name, args in (
                    ("group_set_limit", ("jobs", "t1", 1)),
                    ("group_set_default_limit", ("jobs", 1)),
                    ("pool_set_limit", ("jobs", 1)),
                ):
                    with pytest.raises(asyncpg.LockNotAvailableError):
                        await setter.execute(q[name], *args)
            await setter.execute(q["group_set_limit"], "jobs", "t1", 1)
            assert await pool.claim("wB") is None  # the claim committed first holds the one slot
    finally:
        await holder.close()
        await setter.close()


@pytest.mark.asyncio
@pytest.mark.parametrize("default", [False, True], ids=["own-limit", "default-limit"])
async def test_a_limit_set_while_a_claim_is_in_flight_counts_that_claim(url: str, schema: str, default: bool) -> None:
    """[GR6] Migration 0012: claims of a group without a limit are not counted (items.counted); a
    limit marks the group's claims in flight. One uncommitted when the limit is set is marked too:
    the limit waits for its commit (the settings lock), then marks in a statement of its own, whose
    snapshot sees it."""
    holder = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    setter = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            await pool.push_many([f"t{n}" for n in range(5)], group="t1")
            q = schema_statements(schema)
            name, args = ("group_set_default_limit", ("jobs", 2)) if default else ("group_set_limit", ("jobs", "t1", 2))
            async with holder.transaction():
                assert len(await holder.fetch("SELECT id FROM claim_grouped(0, 'jobs', 'wA', 60, 3)")) == 3
                assert await holder.fetchval("SELECT count(*) FROM items WHERE state = 'claimed' AND counted") == 0
                setting = asyncio.ensure_future(setter.execute(q[name], *args))
                # The setter waits for the settings lock the claim holds (checked in pg_locks, not timed).
                while not await holder.fetchval(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND pid = $1",
                    setter.get_server_pid(),
                ):
                    assert not setting.done()
            await setting
            assert await holder.fetchval("SELECT count(*) FROM items WHERE state = 'claimed' AND counted") == 3
            assert await pool.claim("wB") is None, "3 claims in flight against a limit of 2"
    finally:
        await holder.close()
        await setter.close()


@pytest.mark.asyncio
async def test_a_batch_poisons_a_spent_lease_and_gives_the_turn_to_the_next_item(url: str, schema: str) -> None:
    """[GR2] Migration 0009 claims a batch's items in one statement: a spent lease among a group's
    items is poisoned and takes no turn, and the batch's rows are those one-item claims would take,
    in their order (here: b1, then a's turn, which poisons a1 and takes a2, b2, a3)."""
    conn = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            a1 = await pool.push("a1", group="a", max_attempts=1)
            a2, a3 = await pool.push_many(["a2", "a3"], group="a")
            b1, b2 = await pool.push_many(["b1", "b2"], group="b")
            first = await pool.claim("w1")
            assert first is not None and first.id == a1
            await conn.execute("UPDATE items SET lease_expires_at = lease_expires_at - 1000 WHERE state = 'claimed'")
            taken = await pool.claim_many(4, "w1")
            assert [i.id for i in taken] == [b1, a2, b2, a3]
            spent = await pool.get(a1)
            assert spent is not None and spent.state.name == "POISONED"
    finally:
        await conn.close()


@pytest.mark.asyncio
async def test_a_batch_of_one_group_poisons_a_spent_lease_and_gives_the_turn_to_the_next_item(
    url: str, schema: str
) -> None:
    """[GR2] Migration 0013 locks a lone group's items by a statement of its own (no aggregate):
    a spent lease among them is poisoned and takes no turn, as with several groups. One-item
    claims would poison a1 and take a2, then take a3: so does a batch of 2."""
    conn = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            a1 = await pool.push("a1", group="a", max_attempts=1)
            a2, a3, a4 = await pool.push_many(["a2", "a3", "a4"], group="a")
            first = await pool.claim("w1")
            assert first is not None and first.id == a1
            await conn.execute("UPDATE items SET lease_expires_at = lease_expires_at - 1000 WHERE state = 'claimed'")
            taken = await pool.claim_many(2, "w1")
            assert [i.id for i in taken] == [a2, a3]
            spent = await pool.get(a1)
            assert spent is not None and spent.state.name == "POISONED"
            assert await _vts(conn, "jobs") == {"a": 3.0}  # a1 claimed, then a2 and a3: none for a1 poisoned
            rest = await pool.claim_many(2, "w1")
            assert [i.id for i in rest] == [a4]
    finally:
        await conn.close()


async def _grouped_claim_buffers(conn: asyncpg.Connection, schema: str, offset: float, *, from_the_bottom: bool) -> int:
    """Buffers one grouped claim of one item reads and writes (the call, its statements included),
    rolled back. ``from_the_bottom``: with the group marks deleted first, so each group is read from
    its first entry, as before migration 0011."""
    text = schema_statements(schema)["claim_grouped"]
    args = (offset, "jobs", "probe", 60.0, 1)
    return await claim_buffers(conn, text, *args, marks="group_marks", from_the_bottom=from_the_bottom)


@pytest.mark.asyncio
async def test_under_a_held_vacuum_horizon_a_grouped_claim_reads_as_much_after_many_items_as_after_few(
    url: str, schema: str
) -> None:
    """Migration 0011: a grouped claim reads each group's head from the group's mark, past the
    dead entries its finished items left (a held horizon keeps them all). From the bottom (the
    marks deleted, as grouped claims read before version 11) the same claim reads more the more
    items went through, and after 1,600 items far more than from the marks. (Both also write
    more as the horizon is held: the claim's new row versions and index entries go where the
    dead ones leave room, which the marks do not change.)"""
    clock = ManualClock()
    pin = await asyncpg.connect(postgres_server.SERVER)
    conn = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url, clock_offset=clock.offset) as hive:
            storage = hive.storage
            assert isinstance(storage, PostgresStorage)
            storage.marks_every = 0.0  # marks move before every claim
            pool = hive.pool("jobs")
            await pool.push_many([{"n": i} for i in range(50)], group="big")
            await pool.push_many([{"n": i} for i in range(50)], group="other")
            await pin.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            await pin.fetchval("SELECT txid_current()")  # holds the horizon until it ends
            measured: dict[int, tuple[int, int]] = {}
            through = 0
            for target in (200, 1600):
                while through < target:
                    taken = await pool.claim_many(50, "w1")
                    assert len(taken) == 50
                    assert all(await pool.complete_many([(item, "ok") for item in taken]))
                    for group in ("big", "other"):
                        refill = sum(1 for item in taken if item.group == group)
                        await pool.push_many([{"n": through + i} for i in range(refill)], group=group)
                    through += 50
                # Past the marks' lag, then one claim moves them to the heads of the backlogs.
                clock.advance(5)
                item = await pool.claim("w1")
                assert item is not None
                await pool.complete(item, "ok")
                await pool.push({"n": "refill"}, group=item.group)
                # Once before measuring: the probe connection's first call compiles the function and
                # plans its statements, reading the catalogs (over a thousand buffers).
                await _grouped_claim_buffers(conn, schema, clock.offset(), from_the_bottom=False)
                measured[target] = (
                    await _grouped_claim_buffers(conn, schema, clock.offset(), from_the_bottom=False),
                    await _grouped_claim_buffers(conn, schema, clock.offset(), from_the_bottom=True),
                )
            (_, bottom_few), (marked_many, bottom_many) = measured[200], measured[1600]
            assert bottom_many - bottom_few >= 30, measured  # the horizon is held: dead entries pile up
            # The dead entries of 1,400 items (two each) the bottom walk reads and the marks pass.
            assert bottom_many - marked_many >= 30, measured
    finally:
        await pin.close()
        await conn.close()


_INSERT_PENDING_IN_T = (
    "INSERT INTO items (pool, payload, state, priority, max_attempts, created_at, available_at, grp)"
    " VALUES ('jobs', $1, 'pending', 0, 5, $2, $2, 't')"
)


@pytest.mark.asyncio
async def test_a_group_mark_never_passes_the_start_of_a_transaction_writing_items(url: str, schema: str) -> None:
    """Migration 0011: an item a push keys at its own start may commit after a claim moved its
    group's mark. The mark stays at or below the start of every transaction holding a write lock
    on items, so the item is claimed as soon as it commits."""
    side = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    try:
        async with workhive.open(url) as hive:
            storage = hive.storage
            assert isinstance(storage, PostgresStorage)
            storage.marks_every, storage.marks_lag = 0.0, 0.0
            pool = hive.pool("jobs")
            await pool.push_many(["first", "second"], group="t")
            for _ in range(2):
                item = await pool.claim("w1")
                assert item is not None
                await pool.complete(item, "ok")
            await side.execute("BEGIN")
            # As a push does: the group's row upserted (and locked until the commit), then the item.
            await side.execute(
                "INSERT INTO groups AS old (pool, grp, live) VALUES ('jobs', 't', true)"
                " ON CONFLICT (pool, grp) DO UPDATE SET live = true WHERE NOT old.live"
            )
            await side.execute(_INSERT_PENDING_IN_T, '"late"', await side.fetchval("SELECT now_s(0)"))
            assert await pool.claim("w1") is None  # not committed yet; this claim moved the marks
            low = await side.fetchval("SELECT low FROM group_marks WHERE grp = 't' ORDER BY n DESC LIMIT 1")
            start = await side.fetchval("SELECT extract(epoch FROM now())::float8")
            assert low is not None and low <= start
            await side.execute("COMMIT")
            late = await pool.claim("w1")
            assert late is not None and late.data == "late"
    finally:
        await side.close()


@pytest.mark.asyncio
async def test_an_item_below_its_groups_mark_is_claimed_at_the_next_sweep(url: str, schema: str) -> None:
    """Migration 0011: an item that still ends up below its group's mark (a writer stalled past
    the lag, a clock stepped back) is hidden until a sweep walks the group's band from the
    bottom again, at most SWEEP_EVERY seconds later; then it is claimed, first, as its time says."""
    admin = await asyncpg.connect(postgres_server.SERVER, server_settings={"search_path": schema})
    clock = ManualClock()
    try:
        async with workhive.open(url, clock_offset=clock.offset) as hive:
            storage = hive.storage
            assert isinstance(storage, PostgresStorage)
            storage.marks_every = 0.0
            pool = hive.pool("jobs")
            await pool.push_many(["a", "b", "c"], group="t")
            clock.advance(10)
            a = await pool.claim("w1")  # finds the pool grouped; its group has no mark yet
            assert a is not None and a.data == "a"
            b = await pool.claim("w1")  # the group's first move sweeps, and puts its mark on "b"
            assert b is not None and b.data == "b"
            assert await admin.fetchval("SELECT count(*) FROM group_marks WHERE grp = 't'") == 1
            long_ago = await admin.fetchval("SELECT now_s(0) - 1000")
            await admin.execute(_INSERT_PENDING_IN_T, '"below"', long_ago)
            c = await pool.claim("w1")
            assert c is not None and c.data == "c"  # "below" is hidden under the mark
            assert await pool.claim("w1") is None
            clock.advance(storage.sweep_every)
            below = await pool.claim("w1")
            assert below is not None and below.data == "below"
    finally:
        await admin.close()
