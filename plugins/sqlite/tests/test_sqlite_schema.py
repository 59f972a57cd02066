"""The schema: versions, the SQL files that migrate older files, and files from newer workhives."""

from __future__ import annotations

import hashlib
import json
import re
import sqlite3
from pathlib import Path

import pytest

import workhive
from workhive.errors import SchemaVersionError
from workhive.models import ItemState
from workhive_sqlite import SqliteStorage
from workhive_sqlite.schema import APPLICATION_ID, MIGRATIONS, SCHEMA_VERSION

#: sha256 (first 16 hex digits) of the schema at each version (``_schema_rows``), taken from the
#: migrations as they were Python strings (commit 1908c47): the SQL files must build the same tables.
_SCHEMA_DIGESTS = {
    0: "4f53cda18c2baa0c",
    1: "5fc77b6a662bfb94",
    2: "fd74ab3dc8baccf5",
    3: "f531ee6c7aa9e5a4",
    4: "357bfa708d2dc8f6",
    5: "f4e0a04969c0a91f",  # schedules (0005_schedules.sql, written as SQL from the start)
    6: "21791855b5c7d18d",  # durable steps (0006_steps.sql)
    7: "821668ef8e66aa2d",  # cancellation (0007_cancel.sql)
    8: "ddc02c5d2f3b3bbc",  # groups (0008_groups.sql)
    9: "09fbf1077ae391db",  # a claim by turns counts its groups (0009_group_claims.sql)
    10: "3b35f04af8e5ce38",  # claims counted only where a limit reads them, one state trigger (0010_group_counts.sql)
    11: "75802b186ef72e64",  # items_ready holds ungrouped items only (0011_ready_ungrouped.sql)
    12: "6c9e8b4c8364094b",  # the groups' trigger follows items.moves (0012_trigger_on_moves.sql)
}

#: The statements that move an item's state without assigning ``moves``, so without the groups' trigger
#: (migration 0012): claims (take_turns counts a grouped claim's turns itself; no other pool has work for
#: the trigger) and complete_quiet (run only where the pool's claims are not counted, ops._complete).
_MOVES_UNSEEN = {"claim_one", "claim_ready", "claim_any", "claim_items", "claim_group_items", "complete_quiet"}


def _schema_rows(version: int) -> list[tuple[str, str, str, str]]:
    """What ``sqlite_master`` holds after the first ``version`` migrations, whitespace folded."""
    conn = sqlite3.connect(":memory:")
    try:
        for step in MIGRATIONS[:version]:
            for statement in step:
                conn.execute(statement)
        rows = conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master").fetchall()
    finally:
        conn.close()
    return sorted((kind, name, table, re.sub(r"\s+", " ", sql or "").strip()) for kind, name, table, sql in rows)


@pytest.mark.parametrize("version", sorted(_SCHEMA_DIGESTS))
def test_every_version_builds_the_schema_it_always_built(version: int) -> None:
    rows = _schema_rows(version)
    digest = hashlib.sha256(json.dumps(rows).encode()).hexdigest()[:16]
    assert digest == _SCHEMA_DIGESTS[version], rows


def _assigned_columns(sql: str) -> list[set[str]]:
    """The columns each ``UPDATE items ... SET`` of ``sql`` assigns (a CASE's inner tests are not assignments)."""
    found = []
    pattern = r"UPDATE\s+items\b(?:\s+INDEXED BY \w+)?\s+SET\b(.*?)(?=\bWHERE\b|\bRETURNING\b|\bFROM\b|$)"
    for match in re.finditer(pattern, sql, flags=re.S | re.I):
        found.append({c.lower() for c in re.findall(r"(?:^|,)\s*([a-z_]+)\s*=", match.group(1), flags=re.I)})
    return found


def test_every_statement_that_moves_a_state_assigns_moves_but_the_claims_and_complete_quiet() -> None:
    """Migration 0012: the groups' trigger starts on `UPDATE OF moves`, so a move of state that does not assign
    moves goes unseen by it: a new statement moving items between states must assign it, or be listed above."""
    from workhive_sqlite.sqlfiles import queries

    moving = {}
    for name, sql in queries().items():
        for columns in _assigned_columns(sql):
            if "state" in columns:
                moving[name] = "moves" in columns
    assert {name for name, assigns in moving.items() if not assigns} == _MOVES_UNSEEN
    assert {"complete", "fail", "release", "cancel_one", "group_settle_expired"} <= set(moving)


def test_every_version_up_to_the_current_one_has_its_digest() -> None:
    # A new migration adds its version's digest above, so the test covers it too.
    assert max(_SCHEMA_DIGESTS) == SCHEMA_VERSION


@pytest.mark.asyncio
async def test_a_file_from_a_newer_workhive_is_a_schema_version_error(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path}/hive.db"
    async with workhive.open(url) as hive:
        await hive.pool("p").push(1)
    with sqlite3.connect(tmp_path / "hive.db") as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(SchemaVersionError, match="upgrade workhive-sqlite") as info:
        await SqliteStorage(url).open()
    # Context fields are set from keyword arguments (WorkhiveError), so typed loosely.
    assert getattr(info.value, "found", None) == SCHEMA_VERSION + 1
    with sqlite3.connect(tmp_path / "hive.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert conn.execute("SELECT count(*) FROM items").fetchone()[0] == 1


@pytest.mark.asyncio
async def test_an_older_file_is_migrated_step_by_step_keeping_its_items(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workhive_sqlite import schema

    url = f"sqlite:///{tmp_path}/hive.db"
    async with workhive.open(url) as hive:
        item_id = await hive.pool("p").push({"old": True})
    # A future release adds a step; opening the version-1 file applies it once.
    step = ("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)", "INSERT INTO notes (text) VALUES ('v2')")
    monkeypatch.setattr(schema, "MIGRATIONS", (*schema.MIGRATIONS, step))
    monkeypatch.setattr(schema, "SCHEMA_VERSION", SCHEMA_VERSION + 1)
    for _ in range(2):
        async with workhive.open(url) as hive:
            assert (await hive.pool("p").get(item_id)).data == {"old": True}
    with sqlite3.connect(tmp_path / "hive.db") as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert conn.execute("SELECT text FROM notes").fetchall() == [("v2",)]


def _make_version_1_file(path: Path) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    for statement in MIGRATIONS[0]:
        conn.execute(statement)
    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    conn.execute("PRAGMA user_version = 1")
    rows = [
        # pool, state, finished_at
        ("a", "pending", None),
        ("a", "claimed", None),
        ("a", "done", 1.0),
        ("a", "done", 2.0),
        ("a", "poisoned", 1.0),
        ("b", "done", 1.0),
    ]
    for pool, state, finished in rows:
        conn.execute(
            "INSERT INTO items (pool, payload, state, priority, max_attempts, created_at, available_at, "
            "claimed_by, lease_expires_at, lease_seconds, finished_at, attempts, token) "
            "VALUES (?, '1', ?, 0, 3, 0, 0, ?, ?, ?, ?, ?, ?)",
            (
                pool,
                state,
                "w" if state == "claimed" else None,
                4e9 if state == "claimed" else None,
                30.0 if state == "claimed" else None,
                finished,
                0 if state == "pending" else 1,
                0 if state == "pending" else 1,
            ),
        )
    conn.close()


@pytest.mark.asyncio
async def test_a_version_1_file_is_migrated_with_its_counts(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    _make_version_1_file(path)
    async with workhive.open(f"sqlite:///{path}") as hive:
        a, b = hive.pool("a"), hive.pool("b")
        stats = await a.stats()
        assert (stats.pending, stats.claimed, stats.done, stats.poisoned) == (1, 1, 2, 1)
        assert (await b.stats()).done == 1
        assert sorted(await hive.pools()) == ["a", "b"]
        assert [i.finished_at for i in await a.items(ItemState.DONE)] == [1.0, 2.0]
        assert len(await a.items(ItemState.POISONED)) == 1
        # Counts follow pushes and purges after the migration too.
        await a.push("new")
        assert (await a.purge(0.0)) == 3
        stats = await a.stats()
        assert (stats.pending, stats.claimed, stats.done, stats.poisoned) == (2, 1, 0, 0)
        assert await b.purge(0.0) == 1
        assert await hive.pools() == ["a"]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        indexes = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'index'")}
        assert "items_finished" not in indexes and "items_poisoned" in indexes


@pytest.mark.asyncio
async def test_a_version_9_file_keeps_counting_where_a_limit_reads_the_counts(tmp_path: Path) -> None:
    """Version 10 counts claims only in pools with a group limit; version 9's exact counts carry over there."""
    path = tmp_path / "hive.db"
    async with workhive.open(f"sqlite:///{path}") as hive:
        for pool in ("own", "default", "none"):
            await hive.pool(pool).push_many(["x", "y", "z"], group="a")
    with sqlite3.connect(path, isolation_level=None) as conn:
        # Back to version 9: the flag and the one trigger go, version 9's two triggers come back.
        conn.execute("BEGIN")
        conn.execute("DROP TRIGGER groups_item_moved")
        conn.execute("ALTER TABLE group_pools DROP COLUMN counted")
        conn.execute("ALTER TABLE items DROP COLUMN moves")  # version 12's
        for statement in MIGRATIONS[8]:
            if statement.lstrip().upper().startswith("CREATE TRIGGER"):
                conn.execute(statement)
        conn.execute("UPDATE groups SET lim = 2 WHERE pool = 'own'")
        conn.execute("UPDATE group_pools SET default_lim = 1 WHERE pool = 'default'")
        conn.execute("PRAGMA user_version = 9")
        conn.execute("COMMIT")
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE type = 'trigger'").fetchone()[0] == 4
    async with workhive.open(f"sqlite:///{path}") as hive:
        assert [len(await hive.pool(p).claim_many(5, "w")) for p in ("own", "default", "none")] == [2, 1, 3]
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert dict(conn.execute("SELECT pool, counted FROM group_pools")) == {"own": 1, "default": 1, "none": 0}
        assert dict(conn.execute("SELECT pool, inflight FROM groups WHERE pool != 'none'")) == {"own": 2, "default": 1}
