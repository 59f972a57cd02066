"""``workhive_sqlite.groups``: claims by turns, limits kept as counters, and pools that never use groups.

The rules themselves (GR1-GR9) are the groups contract's; these tests check
what is particular to the SQLite engine: a pool becomes grouped once and stays
so, across handles; the kept counters and heads agree with the items; the
claim reads the groups through their index; a pool without groups never
touches the group tables.
"""

from __future__ import annotations

import itertools
import json
import sqlite3
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from hypothesis import given
from hypothesis import strategies as st

from workhive.models import Ack, GroupReport, NewItem
from workhive.testing import ManualClock
from workhive_sqlite import SqliteStorage
from workhive_sqlite.sqlfiles import queries

LEASE = 60.0


def _items(group: str | None, count: int, priority: int = 0, delay: float = 0.0) -> list[NewItem]:
    """``count`` items whose data names their group (tests read the group off the data)."""
    return [NewItem(json.dumps(f"{group}-{n}"), priority=priority, delay=delay, group=group) for n in range(count)]


def _group_of(item: Any) -> str | None:
    name = json.loads(item.payload).rsplit("-", 1)[0]
    return None if name == "None" else name


async def _claim_groups(store: SqliteStorage, count: int, pool: str = "p") -> list[str | None]:
    """The groups of ``count`` successive one-item claims (fewer if the pool runs dry)."""
    taken = []
    for _ in range(count):
        got = await store.claim(pool, "w", 1, LEASE)
        if not got:
            break
        taken.append(_group_of(got[0]))
    return taken


@pytest_asyncio.fixture
async def store(tmp_path: Path) -> Any:
    clock = ManualClock()
    storage = SqliteStorage(f"sqlite:///{tmp_path}/hive.db", clock=clock)
    storage.clock = clock  # type: ignore[attr-defined]
    await storage.open()
    try:
        yield storage
    finally:
        await storage.close()


def _rows(tmp_path: Path, sql: str, *args: Any) -> list[Any]:
    with sqlite3.connect(tmp_path / "hive.db") as conn:
        return conn.execute(sql, args).fetchall()


def _check_counters(tmp_path: Path, pool: str = "p") -> None:
    """The heads, and the claim counts where they are kept (a limit reads them), equal what the items say."""
    counted = _rows(tmp_path, "SELECT counted FROM group_pools WHERE pool = ?", pool)[0][0]
    limited = _rows(
        tmp_path,
        "SELECT default_lim IS NOT NULL OR EXISTS (SELECT 1 FROM groups WHERE pool = ?1 AND lim IS NOT NULL) "
        "FROM group_pools WHERE pool = ?1",
        pool,
    )[0][0]
    assert counted == limited
    for grp, head, in_flight in _rows(tmp_path, "SELECT grp, head, inflight FROM groups WHERE pool = ?", pool):
        pending = _rows(
            tmp_path, "SELECT max(priority) FROM items WHERE pool = ? AND grp = ? AND state = 'pending'", pool, grp
        )[0][0]
        claimed = _rows(
            tmp_path, "SELECT count(*) FROM items WHERE pool = ? AND grp = ? AND state = 'claimed'", pool, grp
        )[0][0]
        assert head == pending, grp
        if counted:
            assert in_flight == claimed, grp


@pytest.mark.asyncio
async def test_a_pool_without_groups_never_touches_the_group_tables(store: SqliteStorage, tmp_path: Path) -> None:
    await store.push("p", _items(None, 3))
    claimed = await store.claim("p", "w", 2, LEASE)
    await store.complete("p", [Ack(claimed[0].id, claimed[0].token)])
    assert _rows(tmp_path, "SELECT count(*) FROM items WHERE grp IS NOT NULL") == [(0,)]
    assert _rows(tmp_path, "SELECT count(*) FROM group_pools") == [(0,)]
    assert _rows(tmp_path, "SELECT count(*) FROM groups") == [(0,)]
    assert getattr(await store.get("p", claimed[1].id), "group", None) is None


@pytest.mark.asyncio
async def test_groups_take_turns_and_the_ungrouped_items_are_one_group(store: SqliteStorage, tmp_path: Path) -> None:
    await store.push("p", _items("a", 6) + _items("b", 6) + _items(None, 6))
    taken = await _claim_groups(store, 9)
    # Strict rotation: every window of three claims takes one item of each group.
    for start in range(0, 9, 3):
        assert sorted(taken[start : start + 3], key=str) == sorted(["a", "b", None], key=str), taken
    _check_counters(tmp_path)


@pytest.mark.asyncio
async def test_a_batch_claim_takes_turns_like_successive_claims(store: SqliteStorage) -> None:
    await store.push("p", _items("a", 4) + _items("b", 4))
    batch = await store.claim("p", "w", 4, LEASE)
    assert Counter(_group_of(item) for item in batch) == {"a": 2, "b": 2}
    # Within a group, C1 order: the oldest first.
    assert [json.loads(i.payload) for i in batch if _group_of(i) == "a"] == ["a-0", "a-1"]


@pytest.mark.asyncio
async def test_weights_share_the_claims(store: SqliteStorage) -> None:
    await store.set_group_weight("p", "heavy", 3.0)
    await store.push("p", _items("heavy", 40) + _items("light", 40))
    taken = Counter(await _claim_groups(store, 40))
    assert abs(taken["heavy"] - 30) <= 3 and abs(taken["light"] - 10) <= 3, taken


#: After how many claimed items _batched_turns pushes a higher-priority item (between two batches).
PUSHED_AT = 22


async def _batched_turns(path: Path, sizes: list[int]) -> list[Counter[str | None]]:
    """The groups each claim of ``sizes`` takes, alternating two handles, each batch completed by the other.

    Weighted groups (heavy: 3), small groups that run dry inside a batch, and a
    higher-priority item pushed after ``PUSHED_AT`` claimed items (a batch boundary).
    """
    clock = ManualClock()
    handles = [SqliteStorage(f"sqlite:///{path}", clock=clock) for _ in range(2)]
    for handle in handles:
        await handle.open()
    try:
        await handles[0].push("p", _items("heavy", 300) + _items("light", 100))
        await handles[1].push("p", [item for n in range(5) for item in _items(f"s{n}", 7)])
        await handles[1].set_group_weight("p", "heavy", 3.0)
        taken: list[Counter[str | None]] = []
        at = 0
        for n, size in enumerate(sizes):
            if at == PUSHED_AT:
                await handles[1].push("p", _items("light", 1, priority=1))
            got = await handles[n % 2].claim("p", "w", size, LEASE)
            at += size
            taken.append(Counter(_group_of(item) for item in got))
            await handles[(n + 1) % 2].complete("p", [Ack(item.id, item.token) for item in got])
        return taken
    finally:
        for handle in handles:
            await handle.close()


@pytest.mark.asyncio
async def test_weighted_batch_claims_across_handles_take_the_turns_of_one_item_claims(tmp_path: Path) -> None:
    """GR2/GR3: a claim of n from any handle takes what n one-item claims in a row would."""
    sizes = [1, 5, 16, 3, 64, 2, 128, 7, 40]  # 1 + 5 + 16 = PUSHED_AT
    batched = await _batched_turns(tmp_path / "batched.db", sizes)
    single = await _batched_turns(tmp_path / "single.db", [1] * sum(sizes))
    at = 0
    for size, got in zip(sizes, batched):
        assert got == sum(single[at : at + size], Counter()), (size, at)
        at += size
    heavy, light = sum(c["heavy"] for c in batched), sum(c["light"] for c in batched)
    assert heavy == 3 * light or abs(heavy - 3 * light) <= 3 * (1 + 7), (heavy, light)  # GR3's bound
    with sqlite3.connect(tmp_path / "batched.db") as conn:
        for grp, in_flight, head in conn.execute("SELECT grp, inflight, head FROM groups"):
            pending = conn.execute(
                "SELECT max(priority) FROM items WHERE grp = ? AND state = 'pending'", (grp,)
            ).fetchone()[0]
            assert (in_flight, head) == (0, pending), grp


@pytest.mark.asyncio
async def test_a_higher_priority_goes_first_whatever_the_turns(store: SqliteStorage) -> None:
    await store.push("p", _items("a", 3) + _items("b", 2, priority=5))
    assert await _claim_groups(store, 5) == ["b", "b", "a", "a", "a"]


@pytest.mark.asyncio
async def test_a_group_idle_for_long_gets_no_burst(store: SqliteStorage) -> None:
    await store.push("p", _items("a", 30) + _items("b", 30))
    await _claim_groups(store, 20)
    await store.push("p", _items("late", 10))
    taken = await _claim_groups(store, 9)
    assert taken.count("late") == 3, taken


@pytest.mark.asyncio
async def test_a_group_limit_holds_across_handles_and_an_expired_lease_frees_its_slot(
    store: SqliteStorage, tmp_path: Path
) -> None:
    clock = store.clock  # type: ignore[attr-defined]
    other = SqliteStorage(f"sqlite:///{tmp_path}/hive.db", clock=clock)
    await other.open()
    try:
        await store.push("p", _items("a", 5) + _items("b", 5))
        await other.set_group_limit("p", "a", 2)  # another handle: the first learns of it from the file
        first = await store.claim("p", "w", 10, LEASE)
        second = await other.claim("p", "w2", 10, LEASE)
        assert Counter(_group_of(i) for i in first + second) == {"a": 2, "b": 5}
        assert await other.claim("p", "w2", 1, LEASE) == []
        clock.advance(LEASE)  # the leases expire: a's slots are free, its items claimable again
        again = await other.claim("p", "w2", 10, LEASE)
        assert Counter(_group_of(i) for i in again) == {"a": 2, "b": 5}
        _check_counters(tmp_path)
    finally:
        await other.close()


@pytest.mark.asyncio
async def test_a_limit_set_while_claims_are_held_counts_them_and_lifting_it_stops_the_counting(
    store: SqliteStorage, tmp_path: Path
) -> None:
    """Version 10: claims are counted only while a limit reads them; the first limit takes the counts."""
    await store.push("p", _items("a", 6) + _items("b", 6))
    held = await store.claim("p", "w", 6, LEASE)  # no limit yet: 3 of a and 3 of b held, uncounted
    assert Counter(_group_of(i) for i in held) == {"a": 3, "b": 3}
    assert _rows(tmp_path, "SELECT counted FROM group_pools WHERE pool = 'p'") == [(0,)]
    await store.complete("p", [Ack(held[0].id, held[0].token, "{}")])  # a's: 2 of a held
    await store.set_group_limit("p", "a", 3)
    assert _rows(tmp_path, "SELECT counted FROM group_pools WHERE pool = 'p'") == [(1,)]
    _check_counters(tmp_path)
    taken = await store.claim("p", "w", 10, LEASE)
    assert Counter(_group_of(i) for i in taken) == {"a": 1, "b": 3}  # a: one slot left of 3
    _check_counters(tmp_path)
    await store.set_group_limit("p", "a", None)  # the last limit goes: counting stops
    assert _rows(tmp_path, "SELECT counted FROM group_pools WHERE pool = 'p'") == [(0,)]
    rest = [i for i in held + taken if _group_of(i) == "a"][1:]
    await store.complete("p", [Ack(i.id, i.token, "{}") for i in rest[:2]])  # 1 of a held
    await store.set_group_limit("p", None, 2)  # a default limit counts again, from the items
    _check_counters(tmp_path)
    assert Counter(_group_of(i) for i in await store.claim("p", "w", 10, LEASE)) == {"a": 1}


@pytest.mark.asyncio
@pytest.mark.parametrize("limited", [False, True])
async def test_a_completion_writes_its_group_row_only_where_claims_are_counted(
    store: SqliteStorage, limited: bool
) -> None:
    """An unlimited pool's completion changes its item's row alone: no group row, one page less per commit."""
    if limited:
        await store.set_group_limit("p", "a", 5)
    await store.push("p", _items("a", 2))
    held = await store.claim("p", "w", 2, LEASE)
    conn = store._fast.conn  # type: ignore[union-attr]  # the loop's connection runs the completion
    before = conn.total_changes  # rows changed, those of trigger programs included
    assert await store.complete("p", [Ack(held[0].id, held[0].token, "{}")]) == [True]
    assert conn.total_changes - before == (2 if limited else 1)


@pytest.mark.asyncio
async def test_the_default_limit_binds_named_groups_and_not_the_ungrouped(store: SqliteStorage) -> None:
    await store.set_group_limit("p", None, 1)
    await store.set_group_limit("p", "wide", 3)
    await store.push("p", _items("a", 3) + _items("wide", 5) + _items(None, 4))
    taken = await store.claim("p", "w", 20, LEASE)
    assert Counter(_group_of(i) for i in taken) == {"a": 1, "wide": 3, None: 4}


@pytest.mark.asyncio
async def test_the_pool_limit_and_complete_and_claim(store: SqliteStorage, tmp_path: Path) -> None:
    await store.set_pool_limit("p", 2)
    await store.push("p", _items("a", 3) + _items("b", 3))
    held = await store.claim("p", "w", 5, LEASE)
    assert len(held) == 2
    # Completing one frees one slot, which the fused claim takes, and no more.
    accepted, more = await store.complete_and_claim("p", Ack(held[0].id, held[0].token), "w", 3, LEASE)
    assert accepted and len(more) == 1
    await store.set_pool_limit("p", None)
    assert len(await store.claim("p", "w", 10, LEASE)) == 3
    _check_counters(tmp_path)


@pytest.mark.asyncio
async def test_a_paused_group_waits_and_resumes(store: SqliteStorage) -> None:
    clock = store.clock  # type: ignore[attr-defined]
    await store.push("p", _items("a", 2) + _items("b", 2))
    await store.pause_group("p", "a", 30.0)
    assert await _claim_groups(store, 3) == ["b", "b"]
    clock.advance(30.0)
    assert await _claim_groups(store, 3) == ["a", "a"]
    await store.push("p", _items("b", 1))
    await store.pause_group("p", "b", 30.0)
    await store.pause_group("p", "b", None)
    assert await _claim_groups(store, 1) == ["b"]


@pytest.mark.asyncio
async def test_a_pool_with_items_starts_using_groups_and_counts_what_it_held(
    store: SqliteStorage, tmp_path: Path
) -> None:
    await store.push("p", _items(None, 4, priority=1))
    held = await store.claim("p", "w", 2, LEASE)
    await store.set_pool_limit("p", 3)  # the two held count against it at once
    await store.push("p", _items("a", 2, priority=2))
    assert [_group_of(i) for i in await store.claim("p", "w", 5, LEASE)] == ["a"]
    _check_counters(tmp_path)
    assert await store.complete("p", [Ack(item.id, item.token) for item in held]) == [True, True]
    assert [_group_of(i) for i in await store.claim("p", "w", 5, LEASE)] == ["a", None]
    _check_counters(tmp_path)


@pytest.mark.asyncio
async def test_settings_come_before_items_and_the_report_counts_exactly(store: SqliteStorage) -> None:
    clock = store.clock  # type: ignore[attr-defined]
    await store.set_group_weight("p", "later", 2.0)
    await store.set_group_limit("p", "capped", 1)
    await store.set_pool_limit("p", 10)
    report = await store.group_report("p")
    assert (report.pool, report.pool_limit, report.default_limit) == ("p", 10, None)
    assert [(g.group, g.weight, g.limit) for g in report.groups] == [("capped", 1.0, 1), ("later", 2.0, None)]
    await store.push("p", _items("capped", 3) + _items(None, 1) + _items("later", 1, delay=100.0))
    await store.pause_group("p", "later", 20.0)
    await store.claim("p", "w", 10, LEASE)  # takes one of capped (its limit) and the ungrouped one
    clock.advance(LEASE)  # both leases expire: ready again, never in flight
    await store.claim("p", "w", 1, LEASE)  # one of capped's or the ungrouped one, as the turns say
    report = await store.group_report("p")
    stats = {g.group: (g.in_flight, g.ready, g.waiting) for g in report.groups}
    assert sum(s[0] for s in stats.values()) == 1
    assert stats["capped"][1] + stats[None][1] == 3 and stats["later"] == (0, 0, 1)
    later = next(g for g in report.groups if g.group == "later")
    assert later.paused_until is None  # the pause (20 s) ended when the clock moved on 60 s
    assert [g.group for g in report.groups] == [None, "capped", "later"]


def test_a_claim_reads_the_groups_through_their_indexes(tmp_path: Path) -> None:
    from workhive_sqlite.schema import MIGRATIONS

    conn = sqlite3.connect(":memory:")
    for step in MIGRATIONS:
        for statement in step:
            conn.execute(statement)
    q = queries()
    for name, args in (
        ("group_claim_turns", ("p", 0.0, "p", 0.0, "p", 0.0, "p", "p")),
        ("group_ready_items", ("p", "a", 0.0, 16, 0)),
    ):
        text = q[name]
        for n in range(5, 0, -1):
            text = text.replace(f"?{n}", "?")
        plan = " ".join(row[3] for row in conn.execute(f"EXPLAIN QUERY PLAN {text}", args))
        assert "USING INDEX" in plan and "TEMP B-TREE" not in plan, (name, plan)


@pytest.mark.asyncio
async def test_a_waiter_is_not_woken_for_items_a_limit_or_a_pause_holds_back(store: SqliteStorage) -> None:
    from workhive_sqlite.ops import Operations

    clock = store.clock  # type: ignore[attr-defined]
    await store.set_group_limit("p", "a", 1)
    await store.push("p", _items("a", 3) + _items("b", 1, delay=500.0))
    [held] = await store.claim("p", "w", 5, LEASE)
    now = await store.now()
    # a's items are ready but held back by its limit: due when the lease expires, not now.
    assert (await store._run(Operations.next_due, ("p",)))["p"] == held.lease_expires_at
    await store.pause_group("p", "a", 100.0)
    clock.advance(LEASE)  # the lease expired: a's slot is free, but a is paused until now + 100
    assert await store.claim("p", "w", 5, LEASE) == []  # (and the expired lease is settled)
    assert (await store._run(Operations.next_due, ("p",)))["p"] == now + 100.0
    await store.pause_group("p", "a", None)
    assert (await store._run(Operations.next_due, ("p",)))["p"] == await store.now()


@pytest.mark.asyncio
async def test_a_grouped_pool_keeps_its_pending_items_in_the_group_index_alone(
    store: SqliteStorage, tmp_path: Path
) -> None:
    """Version 11: items_ready holds ungrouped items; counts and due times read both ready indexes."""
    from workhive_sqlite.ops import Operations

    now = await store.now()
    await store.push("q", _items(None, 2) + _items(None, 1, delay=30.0))  # a pool without groups
    await store.push("p", _items(None, 2))  # ungrouped at first: joins '' when the pool uses groups
    await store.push("p", _items("a", 3) + _items("b", 2, priority=5, delay=50.0) + _items("c", 1, delay=20.0))
    # Entries per index, counted on its pages (SQLite's dbstat table): q's 3 items, p's 8.
    entries = "SELECT name, sum(ncell) FROM dbstat WHERE name IN ('items_ready', 'items_group_ready') GROUP BY name"
    try:
        assert dict(_rows(tmp_path, entries)) == {"items_ready": 3, "items_group_ready": 8}
    except sqlite3.OperationalError as exc:  # a SQLite built without SQLITE_ENABLE_DBSTAT_VTAB
        assert "dbstat" in str(exc), exc
    for pool, pending, delayed in (("p", 5, 3), ("q", 2, 1)):
        stats = await store.stats(pool)
        assert (stats.pending, stats.delayed, stats.oldest_pending_at) == (pending, delayed, now), pool
    report = {g.group: (g.ready, g.waiting) for g in (await store.group_report("p")).groups}
    assert report == {None: (2, 0), "a": (3, 0), "b": (0, 2), "c": (0, 1)}
    await store.claim("p", "w", 5, LEASE)  # every ready item: the next comes due with c's, the earliest
    assert (await store._run(Operations.next_due, ("p",)))["p"] == now + 20.0
    assert (await store.stats("p")).oldest_pending_at is None
    _check_counters(tmp_path)


@pytest.mark.asyncio
async def test_the_report_lists_a_group_by_its_own_settings_only_while_it_has_them(store: SqliteStorage) -> None:
    clock = store.clock  # type: ignore[attr-defined]
    await store.set_group_weight("p", "weighted", 1.0)  # set to the default: still its own
    await store.set_group_limit("p", "limited", 2)
    await store.set_group_limit("p", "lifted", 2)
    await store.set_group_limit("p", "lifted", None)
    await store.pause_group("p", "paused", 10.0)
    await store.pause_group("p", "resumed", 10.0)
    await store.pause_group("p", "resumed", None)
    assert [g.group for g in (await store.group_report("p")).groups] == ["limited", "paused", "weighted"]
    clock.advance(10.0)  # the pause ended
    assert [g.group for g in (await store.group_report("p")).groups] == ["limited", "weighted"]
    assert await store.group_report("empty") == GroupReport("empty", None, None, ())


async def _claim_beside_another_handle(
    store: SqliteStorage,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    limit: int,
    meddle_after: Callable[[list[bool | str], bool | str], bool],
    their_limit: int,
) -> tuple[list[bool | str], list[Any], list[Any]]:
    """``store.claim("p", "w", limit)`` while another handle (its own connection, as another process:
    it waits for the lock, never chooses early) claims ``their_limit`` for w2 right after a choice of
    turns for which ``meddle_after(planned, this choice)`` is true.

    Returns (planned, mine, theirs): who chose turns, in order (True: the loop's connection, early;
    False: the thread's; "other": the other handle), and the two claims' items.
    """
    from workhive_sqlite import groups
    from workhive_sqlite.ops import Operations

    meddler = sqlite3.connect(tmp_path / "hive.db", isolation_level=None, timeout=5)
    other = Operations(meddler, store.clock)  # type: ignore[attr-defined]
    plan = groups._plan
    planned: list[bool | str] = []
    theirs: list[Any] = []

    def meddling_plan(ops: Operations, *args: Any) -> Any:
        chosen = plan(ops, *args)
        planned.append("other" if ops is other else ops.optimistic)
        if ops is not other and meddle_after(planned, planned[-1]):
            theirs.extend(other.claim("p", "w2", their_limit, LEASE))
        return chosen

    monkeypatch.setattr(groups, "_plan", meddling_plan)
    try:
        mine = await store.claim("p", "w", limit, LEASE)
    finally:
        meddler.close()
    return planned, mine, theirs


@pytest.mark.asyncio
async def test_a_claim_whose_turns_were_chosen_before_another_write_gives_way_and_claims_again(
    store: SqliteStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's connection chooses a claim's turns before taking the write lock (``optimistic_write``).

    Another handle claims between those reads and the claim statement: the statement is
    refused (SQLITE_BUSY_SNAPSHOT, the snapshot is stale), nothing changed, and the claim
    is chosen again once on the loop's connection, on a fresh snapshot (the other handle
    has let the lock go), and counted. Had the stale turns been claimed, the item the
    other handle took would be claimed twice and group a past its limit of 1.
    """
    await store.set_group_limit("p", "a", 1)
    await store.push("p", _items("a", 3) + _items("b", 3))
    # The other handle claims 2 right after the first choice: it commits while this claim only read.
    planned, mine, theirs = await _claim_beside_another_handle(
        store, tmp_path, monkeypatch, 2, lambda planned, choice: len(planned) == 1, 2
    )
    # Chosen early on the loop's connection, the other handle's claim, then chosen again there.
    if sys.version_info >= (3, 11):
        assert planned == [True, "other", True] and store._fast.stale_retries == 1  # type: ignore[union-attr]
    else:  # no result code on the error: it cannot be told from a held lock, so the thread claims
        assert planned == [True, "other", False]
    assert Counter(_group_of(i) for i in theirs) == {"a": 1, "b": 1}
    assert Counter(_group_of(i) for i in mine) == {"b": 2}  # a holds its one slot already
    assert not {i.id for i in mine} & {i.id for i in theirs}
    assert sorted(_rows(tmp_path, "SELECT claimed_by, count(*) FROM items WHERE state = 'claimed' GROUP BY 1")) == [
        ("w", 2),
        ("w2", 2),
    ]
    _check_counters(tmp_path)


@pytest.mark.asyncio
async def test_a_group_reads_more_of_its_items_only_when_its_turn_comes_again(
    store: SqliteStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One turn each: no group reads beyond the first ready item its turn-index row brought.

    A group whose read items are spent waits keyed by the priority it was served at (a
    bound on its next item's) and reads more when that key comes first: a lower priority
    found then lets the others go first, as one-item claims would (GR5).
    """
    from workhive_sqlite import groups

    reads: list[str] = []
    fetch = groups._Candidate.fetch

    def counted(self: Any, *args: Any) -> None:
        reads.append(self.group)
        fetch(self, *args)

    monkeypatch.setattr(groups._Candidate, "fetch", counted)
    await store.push("p", _items("a", 5) + _items("b", 5) + _items("c", 5))
    taken = await store.claim("p", "w", 3, LEASE)
    assert Counter(_group_of(i) for i in taken) == {"a": 1, "b": 1, "c": 1}
    assert reads == []
    await store.push("q", _items("hi", 1, priority=5) + _items("hi", 1) + _items("mid", 3, priority=1))
    taken = await store.claim("q", "w", 4, LEASE)
    assert [(_group_of(i), i.priority) for i in taken] == [("hi", 5), ("mid", 1), ("mid", 1), ("mid", 1)]
    assert reads == ["hi", "mid"]  # hi's next is priority 0: read once, then it waits behind mid


@pytest.mark.asyncio
async def test_a_claim_reads_settings_and_turns_in_one_statement_and_sees_another_handles_settings(
    store: SqliteStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """group_claim_turns brings the pool's settings with the turns: one read, on one snapshot.

    Settings another process commits between two claims (a group limit, a pause, a pool
    limit) bind the next claim; an expired lease found by that read is settled and the
    turns read again, so its item is served in its turn.
    """
    from workhive_sqlite import groups
    from workhive_sqlite.ops import Operations

    clock = store.clock  # type: ignore[attr-defined]
    await store.push("p", _items("a", 4) + _items("b", 4) + _items("c", 6))
    conn = sqlite3.connect(tmp_path / "hive.db", isolation_level=None, timeout=5)
    other = Operations(conn, clock)  # another process's handle
    seen: list[str] = []
    real = store._fast.conn  # type: ignore[union-attr]
    try:
        assert sorted(_group_of(i) for i in await store.claim("p", "w", 3, LEASE)) == ["a", "b", "c"]
        groups.set_group_limit(other, "p", "a", 1)
        groups.pause_group(other, "p", "b", 100.0)
        real.set_trace_callback(seen.append)
        assert [_group_of(i) for i in await store.claim("p", "w", 3, LEASE)] == ["c"] * 3  # a at 1 of 1, b paused
        real.set_trace_callback(None)
        reads = [s for s in seen if s.lstrip().upper().startswith("SELECT")]
        # The settings and the turns in one statement; c, alone in turn (a full, b paused), takes its three
        # turns by one UPDATE off its index (claim_group_items): none of its items is read first.
        assert [s for s in reads if "group_pools" in s or "groups_turns" in s] == reads[:1]
        assert "group_pools" in reads[0] and "groups_turns" in reads[0] and len(reads) == 1
        claims = {s for s in seen if s.lstrip().startswith("UPDATE items SET")}  # (traced once a row returned)
        assert len(claims) == 1 and "INDEXED BY items_group_ready" in claims.pop()
        groups.set_pool_limit(other, "p", 4)
        assert await store.claim("p", "w", 3, LEASE) == []  # 4 in flight: the pool is at its limit
    finally:
        real.set_trace_callback(None)
        conn.close()
    _check_counters(tmp_path)
    clock.advance(LEASE)  # every lease expired: settled by the next claim, then the turns read again
    taken = await store.claim("p", "w", 5, LEASE)
    assert Counter(_group_of(i) for i in taken) == {"a": 1, "c": 3}  # b paused, a limited to 1, the pool to 4
    _check_counters(tmp_path)


@pytest.mark.asyncio
async def test_a_claim_that_loses_its_snapshot_twice_goes_to_the_thread_after_one_retry(
    store: SqliteStorage, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One retry on the loop's connection at most: a second stale snapshot hands the claim to the thread."""
    await store.push("p", _items("a", 4) + _items("b", 4))
    # The other handle claims 1 after every choice made early on the loop's connection.
    planned, mine, theirs = await _claim_beside_another_handle(
        store, tmp_path, monkeypatch, 3, lambda planned, choice: choice is True, 1
    )
    retried = sys.version_info >= (3, 11)  # the error carries SQLITE_BUSY_SNAPSHOT's code
    assert planned == ([True, "other", True, "other", False] if retried else [True, "other", False])
    assert store._fast.stale_retries == (1 if retried else 0)  # type: ignore[union-attr]
    assert len(mine) == 3 and not {i.id for i in mine} & {i.id for i in theirs}
    claimed = _rows(tmp_path, "SELECT count(*) FROM items WHERE state = 'claimed'")[0][0]
    assert claimed == len(mine) + len(theirs)
    _check_counters(tmp_path)


def _turn_by_turn(vt: float, pool_vt: float, weight: float, turns: int) -> tuple[float, float]:
    """The virtual-time rule as single claims apply it, one turn at a time."""
    for _ in range(turns):
        pool_vt = max(vt, pool_vt)
        vt = pool_vt + 1.0 / weight
    return vt, pool_vt


@given(
    vt=st.floats(0, 1e15, allow_nan=False),
    pool_vt=st.floats(0, 1e15, allow_nan=False),
    weight=st.floats(1e-6, 1e6, allow_nan=False),
    turns=st.integers(0, 600),
)
def test_a_lone_groups_turns_sum_its_vt_exactly_as_that_many_single_claims(
    vt: float, pool_vt: float, weight: float, turns: int
) -> None:
    """[GR2] a batch's turns of one group move its vt and the pool's to the very floats that as many single
    claims would (a product, or a sum in another order, rounds differently and changes the next turn)."""
    from workhive_sqlite.groups import _after_turns

    assert _after_turns(vt, pool_vt, weight, turns) == _turn_by_turn(vt, pool_vt, weight, turns)


def _statements_with_triggers(traced: list[str]) -> int:
    """How many statements started a trigger program, from a trace: SQLite traces a trigger's program (and each
    statement in it) with its statement's text again, straight after the statement (whatever its WHEN says)."""
    runs = [len(list(run)) for _, run in itertools.groupby(traced)]
    return sum(1 for length in runs if length > 1)


@pytest.mark.asyncio
@pytest.mark.parametrize("group", [None, "a"])
async def test_claims_and_completions_in_a_transaction_start_no_trigger_where_claims_are_not_counted(
    store: SqliteStorage, tmp_path: Path, group: str | None
) -> None:
    """Migration 0012: the groups' trigger follows `moves`, which neither a claim nor complete_quiet assigns: in a
    pool without a limit its start (about 13,000 instructions a row, to do nothing) is gone from both."""
    await store.push("p", _items(group, 4))
    connections = [store._fast.conn, store._ops.conn]  # type: ignore[union-attr]  # the loop's and the thread's
    traced: list[str] = []
    for conn in connections:
        conn.set_trace_callback(traced.append)
    try:
        held = await store.claim("p", "w", 4, LEASE)
        accepted = await store.complete("p", [Ack(i.id, i.token, "{}") for i in held])
    finally:
        for conn in connections:
            conn.set_trace_callback(None)
    assert len(held) == 4 and accepted == [True] * 4
    assert any(text.lstrip().upper().startswith("UPDATE ITEMS SET STATE = 'DONE'") for text in traced), traced
    assert _statements_with_triggers(traced) == 0, traced


@pytest.mark.asyncio
async def test_a_batch_of_completions_frees_the_slots_of_a_counted_group(store: SqliteStorage, tmp_path: Path) -> None:
    """Where claims are counted a batch's completions go through the trigger (complete, not complete_quiet): each
    lowers its group's count, and the limit's slots are free again."""
    await store.set_group_limit("p", "a", 2)
    await store.push("p", _items("a", 6) + _items("b", 2))
    held = await store.claim("p", "w", 10, LEASE)
    assert Counter(_group_of(i) for i in held) == {"a": 2, "b": 2}
    connections = [store._fast.conn, store._ops.conn]  # type: ignore[union-attr]
    traced: list[str] = []
    for conn in connections:
        conn.set_trace_callback(traced.append)
    try:
        assert await store.complete("p", [Ack(i.id, i.token, "{}") for i in held]) == [True] * 4
    finally:
        for conn in connections:
            conn.set_trace_callback(None)
    assert _statements_with_triggers(traced) == 4, traced
    _check_counters(tmp_path)
    assert Counter(_group_of(i) for i in await store.claim("p", "w", 10, LEASE)) == {"a": 2}
    _check_counters(tmp_path)
