"""The SQL files: every statement from ``sql/queries.sql``, each migration a numbered file, all shipped."""

from __future__ import annotations

import hashlib
from importlib.resources import files
from pathlib import Path

import pytest
from sqlite_statements import record_every_operation, tokens, written_texts

from workhive_sqlite import budget, ops
from workhive_sqlite.schema import SCHEMA_VERSION
from workhive_sqlite.sqlfiles import migrations, queries, statements

#: sha256 (first 16 hex digits) of each statement's tokens (``sqlite_statements.tokens``: the
#: text without the whitespace between tokens, which SQLite ignores), taken from the statements
#: as they were Python strings (commit 1908c47): moving them to queries.sql changed none.
_STATEMENT_DIGESTS = {
    "claim_one": "94324e88a6e52584",  # version 11: items_ready holds ungrouped items
    "claim_ready": "766f5160bab9e7ad",  # version 11: items_ready holds ungrouped items
    "claim_any": "61217868870b56da",  # version 11: items_ready holds ungrouped items
    "peek": "ebada1067abf0365",  # version 11: items_ready holds ungrouped items
    "poison_expired": "9433ddbc0cafc680",  # version 12: assigns moves, which the groups\' trigger follows
    "complete": "389acbba657b3647",  # version 12: assigns moves, which the groups\' trigger follows
    "complete_quiet": "9effb47c826ede61",  # version 12
    "group_counts_claims": "e7e5d60e60c30728",  # version 12
    "fail": "f2cbb3c48e7caa91",  # version 12: assigns moves, which the groups\' trigger follows
    "release": "718805632534f65f",  # version 12: assigns moves, which the groups\' trigger follows
    "extend": "d82fa83232b35ad9",
    "last_item_id": "62276eada0adc8d0",
    "live_duplicate": "e06a4d8aef6bd8aa",
    "insert_items": "86ef1b294c1e4fb3",  # the group column (migration 8)
    "count_rows": "18d7109938ce2dd7",
    "get_item": "93b0642d8d02cdc2",  # the group column (migration 8)
    "list_items": "847d0b1af06c10bb",  # the group column (migration 8)
    "requeue_all": "8d4e9287f6741b82",  # version 12: assigns moves, which the groups\' trigger follows
    "requeue_one": "6ab9473337ecb2d1",  # version 12: assigns moves, which the groups\' trigger follows
    "poison_lost_worker": "c1c84439ba060d2f",  # version 12: assigns moves, which the groups\' trigger follows
    "poison_lost_worker_in_pool": "c6a82343f052e20b",  # version 12: assigns moves, which the groups\' trigger follows
    "release_worker": "f3c434ee11907219",  # version 12: assigns moves, which the groups\' trigger follows
    "release_worker_in_pool": "8be1b4db3f913629",  # version 12: assigns moves, which the groups\' trigger follows
    "refund_worker": "a4aa0a5e86653d88",  # version 12: assigns moves, which the groups\' trigger follows
    "refund_worker_in_pool": "4a9aa46a14a5588d",  # version 12: assigns moves, which the groups\' trigger follows
    "purge_candidates": "5ae0866551b5c84a",  # cancelled items too (migration 5)
    "purge_item": "1783d1dc7711c99a",
    "count_pending": "8198f096c8af4bec",  # version 11: items_ready holds ungrouped items
    "oldest_ready": "f4bac58dd61db31c",  # version 11: items_ready holds ungrouped items
    "count_expired": "a0873f22a1f03df1",
    "count_claimed": "7175ad3b46559833",
    "count_poisoned": "f43ef514397063e0",
    "pool_rows": "ef110fed242b0f3e",
    "pools": "15ccd110c86c1b15",
    "next_pending": "895250c96469dfdf",  # version 11: items_ready holds ungrouped items
    "next_lease_expiry": "3e3978d4ca91e781",
    "register_worker": "d25518a5f001e5d1",
    "worker_status": "54d2b91911898372",
    "heard_from": "dc761b81db1b2aa6",
    "extend_worker_leases": "7a1b92f061a3cec5",
    "set_worker_status": "6e63b7e090a4f09e",
    "get_worker": "6b965629aa56d3ae",
    "list_workers": "6774d5fd1caebdc2",
    "list_workers_on_host": "3cc0ce036b8b9da1",
    "silent_workers": "22b479b8e7146fd8",
    "worker_lost": "b6e1685e78426e00",
    "state_expire": "0eee9019c5be4cad",
    "state_put": "25578c3fa2720154",
    "state_get": "4b2a3c540390540b",
    "state_scan": "aede0320bfb5c3d1",
    "state_delete": "944866731295bc4d",
    "budget_tats": "545229fedf47ecf1",
    "budget_store": "9a144d945113dbd4",
    "clock_anchor": "b8ac1484dc8c93ba",
    "clock_latest": "18593a3116fee56a",
    "clock_set_anchor": "c8f7c9d97717ab7d",
    "clock_seen": "36e1aa94b9b3103c",
    "user_tables": "a5e242d2bdf7f44c",
    # Schedules were written as SQL from the start (no Python string before them).
    "schedule_add": "06bed8da9439d907",
    "schedule_get": "a10da882337bb42d",
    "schedule_list": "077680a72bf7282d",
    "schedule_remove": "2727689cc268e3c5",
    "schedule_advance": "c8ca8f2d0a3eff8b",
    # durable steps (schema version 6)
    "step_claim_is_current": "bd4c4da38d9e9b42",
    "step_insert": "011b4c6b28a3331d",
    "step_list": "c35f69d3ac8a0988",
    "step_clear": "7cd86a40a9bea2ac",
    # cancellation (Pool.cancel, migration 7)
    "cancel_state": "491137a546f90a83",
    "cancel_one": "07514f5a3a526605",  # version 12: assigns moves, which the groups\' trigger follows
    "requeue_cancelled_one": "add093b50b1e4d24",  # version 12: assigns moves, which the groups\' trigger follows
    "count_cancelled": "96a24ff2c28c86c9",
    # groups (workhive_sqlite.groups, migration 8)
    "group_pool": "ce239067e06dc20b",
    "group_pool_add": "4da250f0bad13375",
    "group_adopt_pending": "46350f8a063630cc",
    "group_adopt_claimed": "9086a4f14b71232f",
    "group_adopt_poisoned": "be2e7f80205d4677",
    "group_adopt_cancelled": "8b5dcf968af91c5e",
    "group_adopt_counts": "b58f66a801730815",
    "group_claim_turns": "91dc97b643f9c16d",  # the settings and the turns in one read
    "group_pool_in_flight": "8404a8e5e4d95351",
    "group_settle_expired": "e969a12a6b777d58",  # version 12: assigns moves, which the groups\' trigger follows
    "group_pool_settings": "728ec9b539b5f3ad",
    "group_ready_items": "25243ea5cdc04a8b",
    "claim_items": "a82ca00781164980",
    "claim_group_items": "dd3cf59460ef56fd",  # a group alone in turn, claimed off its index
    "group_took_turns": "93ac24245234c8c8",
    "group_pool_vt": "567b456a2d31a068",
    "group_count_claims": "52bdebbf3dfdf759",  # version 10
    "group_recount": "9ae6cb76026a4a69",
    "group_set_weight": "53b253618a90f967",
    "group_set_limit": "96b97be4197d1680",
    "group_pause": "514b79fa1c340af5",
    "group_set_default_limit": "b38a78a5e82d5d27",
    "group_set_pool_limit": "a2ffe72324d92124",
    "group_report_settings": "d2afc49e6fa73ca4",
    "group_report_pending": "c6efdca7671e16cc",  # version 11: items_ready holds ungrouped items
    "group_report_claimed": "1764871a24b70b15",
    "group_next_pending": "87618c18a92db68d",  # version 11: items_ready holds ungrouped items
    "group_next_resume": "e5bfd694716da867",
}
#: The same for the texts generated from a statement: 100 rows of insert_items, two keys of budget_tats.
_GENERATED_DIGESTS = {"insert_items": "72c0652370867a58", "budget_tats": "51d0944ea953602e"}


def _digest(sql: str) -> str:
    return hashlib.sha256(tokens(sql).encode()).hexdigest()[:16]


def test_every_statement_is_the_one_it_was_as_a_python_string() -> None:
    assert {name: _digest(text) for name, text in queries().items()} == _STATEMENT_DIGESTS
    generated = {"insert_items": ops._insert_sql(ops._INSERT_ROWS), "budget_tats": budget._select(2)}
    assert {name: _digest(text) for name, text in generated.items()} == _GENERATED_DIGESTS
    # What runs is those texts, built once at import.
    assert (ops._INSERT_ONE, ops._INSERT_MANY) == (queries()["insert_items"], generated["insert_items"])
    assert ops._CLAIM_ONE is queries()["claim_one"]


def test_every_statement_sqlite_runs_comes_from_the_sql_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every operation, along each branch with a statement of its own, runs only statements of
    queries.sql (or the texts generated from two of them) and the migrations; and every
    statement of queries.sql is run by some operation, so the file holds no dead text."""
    seen, written = record_every_operation(tmp_path, monkeypatch)
    run = set(written_texts(seen, written))
    from_file = set(queries().values())
    generated = {ops._INSERT_MANY} | {budget._select(n) for n in range(2, 4)}
    migration_statements = {statement for _, step in migrations() for statement in step}
    assert run - from_file - generated - migration_statements == set()
    unused = {name for name, text in queries().items() if text not in run}
    assert unused == set()
    assert ops._INSERT_MANY in run and budget._select(2) in run


def test_the_version_is_the_number_of_migration_files_and_they_run_1_to_n() -> None:
    assert [version for version, _ in migrations()] == list(range(1, SCHEMA_VERSION + 1))
    names = sorted(entry.name for entry in (files("workhive_sqlite") / "sql" / "migrations").iterdir())
    assert [int(name[:4]) for name in names if name.endswith(".sql")] == list(range(1, SCHEMA_VERSION + 1))


def test_the_sql_files_are_package_data() -> None:
    tomllib = pytest.importorskip("tomllib", reason="reading pyproject.toml needs Python >= 3.11")
    pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
    package_data = tomllib.loads(pyproject.read_text(encoding="utf-8"))["tool"]["setuptools"]["package-data"]
    root = files("workhive_sqlite")
    shipped = {
        str(path.relative_to(Path(str(root))))
        for pattern in package_data["workhive_sqlite"]
        for path in Path(str(root)).glob(pattern)
    }
    migration_files = {f"sql/migrations/{entry.name}" for entry in (root / "sql" / "migrations").iterdir()}
    assert migration_files and migration_files | {"sql/queries.sql"} <= shipped


def test_statements_end_where_sqlite_says_and_keep_semicolons_in_strings_and_comments() -> None:
    script = (
        "-- a comment; with a semicolon\n"
        "CREATE TABLE t (x TEXT DEFAULT 'a;b');\n"
        "\n"
        "INSERT INTO t (x)\n    VALUES ('c');\n"
        "-- trailing comment\n"
    )
    assert statements(script) == (
        "-- a comment; with a semicolon\nCREATE TABLE t (x TEXT DEFAULT 'a;b')",
        "INSERT INTO t (x)\n    VALUES ('c')",
    )


def test_an_unfinished_statement_in_a_file_is_refused_naming_it() -> None:
    with pytest.raises(RuntimeError, match="unfinished statement: 'DROP TABLE t'"):
        statements("CREATE TABLE t (x);\nDROP TABLE t\n")
