"""Every statement workhive-sqlite runs, recorded while one sitting calls every operation.

``record_every_operation`` drives ``Operations`` (and the schema, the clock and
the budget functions) on one ``sqlite3`` connection wrapped so every statement
it is given is noted, and notes the ``?N`` text each ``_bind``-ed statement was
written as (what the SQL file holds). ``tokens`` is SQL text with the
whitespace between tokens dropped, which SQLite's tokenizer ignores: two
statements with the same tokens are the same statement.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from workhive.budgets import BudgetTake
from workhive.models import Ack, ItemState, NewItem, WorkerFilter, WorkerRegistration, WorkerStatus
from workhive.schedules import Schedule
from workhive_sqlite import groups, schedules
from workhive_sqlite import ops as ops_module
from workhive_sqlite.budget import take_budget
from workhive_sqlite.clock import HiveClock, TimeSources
from workhive_sqlite.ops import Operations
from workhive_sqlite.schema import migrate

# A string literal (kept whole: whitespace in it matters), a word (keyword, name,
# number, ?N parameter), a two-character operator, or any other single character.
_TOKEN = re.compile(r"'(?:[^']|'')*'|[A-Za-z_0-9?.$]+|<=|>=|<>|!=|\|\||==|\S")


def tokens(sql: str) -> str:
    """``sql`` as its tokens joined by one space."""
    return " ".join(_TOKEN.findall(sql))


#: Statements that are connection control, not queries: they stay in Python.
CONTROL = re.compile(r"BEGIN|BEGIN IMMEDIATE|COMMIT|ROLLBACK|PRAGMA [a-z_]+(\([A-Za-z0-9]*\))?( = [A-Za-z0-9]+)?")


class _Recording:
    """A ``sqlite3.Connection`` that notes the text of every statement it runs."""

    def __init__(self, conn: sqlite3.Connection, seen: list[str]) -> None:
        self._conn = conn
        self._seen = seen

    def execute(self, sql: str, parameters: Any = ()) -> sqlite3.Cursor:
        self._seen.append(sql)
        return self._conn.execute(sql, parameters)

    def executemany(self, sql: str, parameters: Any) -> sqlite3.Cursor:
        self._seen.append(sql)
        return self._conn.executemany(sql, parameters)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


def _items(n: int, key: Callable[[int], str | None] = lambda i: None) -> list[NewItem]:
    return [NewItem(payload=f'{{"i": {i}}}', dedup_key=key(i)) for i in range(n)]


def _workload(ops: Operations, hive_clock: HiveClock, now: list[float], path: str) -> None:
    """Call every operation, along every branch that runs a statement of its own."""
    conn: Any = ops.conn
    migrate(conn, path, ops.begin)
    ops.write(hive_clock.anchor, conn)  # a new boot: reads the row, the latest times, stores an anchor
    ops.write(hive_clock.record, conn)
    # Pushes: a 100-row statement plus the tail row by row, and dedup keys (live and in the batch).
    ids = ops.push("p", _items(103))
    ops.push("p", _items(3, key=lambda i: "k"))
    ops.push("p", _items(1, key=lambda i: "k"))
    # Claims: one, several, none ready (a peek), and with an expired lease about (poison, merged claim).
    one = ops.claim("p", "w1", 1, 30.0)
    many = ops.claim("p", "w1", 5, 30.0)
    assert len(one) == 1 and len(many) == 5
    assert ops.claim("empty", "w1", 1, 30.0) == []
    ops.push("q", [NewItem(payload="1", max_attempts=1), NewItem(payload="2")])
    assert len(ops.claim("q", "w1", 1, 10.0)) == 1
    now[0] += 20.0
    assert len(ops.claim("q", "w1", 2, 10.0)) == 1  # the expired one is poisoned, the other taken
    # Acks on claimed items.
    assert ops.complete("p", [Ack(one[0].id, one[0].token, "r")]) == [True]
    assert ops.complete("p", [Ack(m.id, m.token, None) for m in many[:2]]) == [True, True]
    done, more = ops.complete_and_claim("p", Ack(many[2].id, many[2].token, None), "w1", 1, 30.0)
    assert done and len(more) == 1
    assert ops.fail("p", many[3].id, many[3].token, "boom", 0.0, True) is not None
    assert ops.release("p", many[4].id, many[4].token, 0.0)
    assert ops.extend("p", more[0].id, more[0].token, 60.0) is not None
    # Durable steps: stored under the live claim, refused under another, read, cleared once finished.
    assert ops.step_put("p", more[0].id, more[0].token, "s", "1", False)
    assert not ops.step_put("p", more[0].id, more[0].token + 1, "s", "2", False)
    assert [s.key for s in ops.step_list("p", more[0].id)] == ["s"]
    assert ops.step_clear("p", [more[0].id]) == 0  # still claimed: kept
    assert ops.get("p", ids[0]) is not None
    assert ops.list_items("p", ItemState.DONE, 10, 0)
    assert ops.requeue("p", None) == 1
    ops.fail("p", more[0].id, more[0].token, "boom", 0.0, True)
    assert ops.step_clear("p", [more[0].id]) == 1  # poisoned now: cleared
    assert ops.requeue("p", [more[0].id]) == 1
    # Cancelling (an unknown id and a live one), and requeueing the cancelled one by id.
    assert ops.cancel("p", ["i" + "f" * 16, more[0].id]) == [None, ItemState.PENDING]
    assert ops.requeue("p", [more[0].id]) == 1
    # Releasing a worker's items: in one pool or all, spending the attempt or refunding it.
    for pool in ("p", None):
        for spend in (True, False):
            ops.claim("p", "w2", 1, 30.0)
            assert ops.release_by_worker(pool, "w2", spend) == 1
    # Workers.
    ops.register_worker(WorkerRegistration(worker_id="w3", host="h", pid=1, pools=("p",)))
    ops.heartbeat("w3")
    ops.set_worker_status("w3", WorkerStatus.BUSY, "on p")
    assert ops.get_worker("w3") is not None
    assert len(ops.list_workers(WorkerFilter())) == 1 and len(ops.list_workers(WorkerFilter(host="h"))) == 1
    now[0] += 100.0
    assert len(ops.reap(10.0)) == 1
    # Reading the pool.
    ops.stats("p")
    assert ops.pools() == ["p", "q"]
    ops.next_due(["p"])
    ops.poll(-1, ["p"])
    ops.checkpoint(0)
    # Finished items go.
    now[0] += 100.0
    assert ops.purge("p", 10.0) > 0
    # Shared state.
    ops.state_put("n", "k", "v", 5.0)
    assert ops.state_get("n", "k") == "v" and ops.state_scan("n") == {"k": "v"}
    assert ops.state_delete("n", "k")
    # Budgets: one key and several, so the stored times are written too.
    take = BudgetTake("a#1:rpm", 1.0, 10.0, 1.0)
    take_budget(ops, [[take]], 0.0)
    take_budget(ops, [[take, BudgetTake("a#1:tpm", 0.1, 10.0, 5.0)]], 0.0)
    # Schedules: add (and a taken name), read, fire (and a tick fired already), remove.
    schedule = Schedule("s", "p", None, 60.0, "UTC", "1", 0, now[0])
    assert schedules.schedule_add(ops, schedule) and not schedules.schedule_add(ops, schedule)
    assert schedules.schedule_get(ops, "s") == schedule and schedules.schedule_list(ops) == [schedule]
    assert schedules.schedule_fire(ops, "s", now[0] + 60.0, NewItem("1")) is not None
    assert schedules.schedule_fire(ops, "s", now[0] + 60.0, NewItem("1")) is None
    assert schedules.schedule_remove(ops, "s")
    # Groups: a pool with a held item starts using them (a grouped push adopts its items), a push
    # finds that out by its probe, every setting, claims by turns (an expired lease about; a group
    # taking two turns), a waiter's due time while a limit and a pause hold every ready item back, the report.
    ops.push("g", _items(2))
    assert len(ops.claim("g", "w1", 1, 10.0)) == 1
    ops.push("g", [NewItem(payload="1", group="t")])
    ops.push("g", _items(1))
    groups.set_group_weight(ops, "g", "t", 2.0)
    groups.set_group_limit(ops, "g", "t", 1)
    groups.set_group_limit(ops, "g", None, 2)
    now[0] += 20.0
    assert len(ops.claim("g", "w1", 2, 30.0)) == 2
    assert [item.group for item in ops.claim("g", "w1", 1, 30.0)] == [None]  # t is at its limit
    groups.set_pool_limit(ops, "g", 2)
    groups.pause_group(ops, "g", "t", 60.0)
    assert ops.next_due(["g"])["g"] == now[0] + 30.0
    assert [g.group for g in groups.group_report(ops, "g").groups] == [None, "t"]
    # A group alone in turn is claimed off its index by one statement (claim_group_items); beside
    # another, a group taking a second turn in one claim reads its next ready items (its first came
    # with its row; v's weight gives u two turns to its one).
    ops.push("h", [NewItem(payload="1", group="u") for _ in range(3)])
    assert [item.group for item in ops.claim("h", "w1", 2, 30.0)] == ["u", "u"]
    groups.set_group_weight(ops, "h", "v", 0.5)
    ops.push("h", [NewItem(payload="1", group="u") for _ in range(3)] + [NewItem(payload="1", group="v")])
    assert sorted(item.group for item in ops.claim("h", "w1", 3, 30.0)) == ["u", "u", "v"]


def record_every_operation(tmp: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str]]:
    """(the text of every statement run, as given to SQLite; the ``?N`` text each ``_bind``-ed one was written as)."""
    seen: list[str] = []
    written: list[str] = []
    bind = ops_module._bind

    def recording_bind(sql: str, args: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        written.append(sql)
        return bind(sql, args)

    monkeypatch.setattr(ops_module, "_bind", recording_bind)
    raw = sqlite3.connect(tmp / "hive.db", isolation_level=None)
    try:
        raw.execute("PRAGMA journal_mode = WAL")
        now = [1000.0]
        clock = HiveClock(TimeSources(wall=lambda: 1000.0, monotonic=lambda: 0.0, boot_id=lambda: "boot"))
        conn: Any = _Recording(raw, seen)
        _workload(Operations(conn, lambda: now[0]), clock, now, str(tmp / "hive.db"))
    finally:
        raw.close()
    return seen, written


def written_texts(seen: list[str], written: list[str]) -> Iterator[str]:
    """Each statement run, as written in the source (``?N`` for a ``_bind``-ed one), connection control left out."""
    source = {ops_module._positional(sql)[0]: sql for sql in written}
    for sql in seen:
        if not CONTROL.fullmatch(sql.strip()):
            yield source.get(sql, sql)
