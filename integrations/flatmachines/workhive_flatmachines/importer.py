"""Moving a flatmachines SQLite file (``SQLiteWorkBackend`` / ``SQLiteRegistrationBackend``) into a hive.

What moves:

* items whose status is ``pending`` or ``claimed``, to the pool of the same
  name, with their data and the attempts they have left
  (``max_retries - attempts``, at least one); claimed ones come back pending:
  their claims were made outside workhive and carry no fencing token;
* every worker of ``worker_registry``, with status, host, pid, capabilities,
  ``started_at``, ``current_task_id`` and heartbeat metadata.

Completed, failed and poisoned items stay behind (counted in the report).
The source file is opened read-only. Each moved item is recorded in the
hive's shared state (``flatmachines.imported``) and pushed with a dedup key,
and a worker already in the registry is left alone, so a second run moves
nothing twice.
"""

from __future__ import annotations

import json
import os
import sqlite3
from typing import Any

import attrs
import click

import workhive
from workhive.errors import InvalidArgument, WorkhiveError
from workhive.validation import check_name
from workhive_flatmachines.convert import workhive_status
from workhive_flatmachines.registration import SIDE_NAMESPACE

__all__ = ["IMPORTED_NAMESPACE", "ImportReport", "import_flatmachines", "print_report"]

#: shared-state namespace: flatmachines item id -> the workhive id it became
IMPORTED_NAMESPACE = "flatmachines.imported"


@attrs.define
class ImportReport:
    """What an import moved (or, with ``dry_run``, would move), and what it left behind and why."""

    source: str
    dry_run: bool
    items_moved: dict[str, int] = attrs.field(factory=dict)  # pool -> count
    claimed_released: int = 0
    items_already: int = 0
    items_left: dict[str, int] = attrs.field(factory=dict)  # flatmachines status -> count
    workers_moved: int = 0
    workers_already: int = 0
    skipped: list[tuple[str, str]] = attrs.field(factory=list)  # (what, why)

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["skipped"] = [{"what": w, "why": y} for w, y in self.skipped]
        return data


def _open_source(path: str) -> sqlite3.Connection:
    if not os.path.isfile(path):
        raise InvalidArgument(f"{path}: no such file; give the path of a flatmachines SQLite database", path=path)
    try:
        conn = sqlite3.connect(f"file:{os.path.abspath(path)}?mode=ro", uri=True)
        conn.row_factory = sqlite3.Row
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.DatabaseError as exc:
        raise InvalidArgument(
            f"{path} is not a SQLite database ({exc}); give a flatmachines database", path=path
        ) from None
    if not tables & {"work_pool", "worker_registry"}:
        conn.close()
        raise InvalidArgument(
            f"{path} has neither a work_pool nor a worker_registry table: it is not a flatmachines database",
            path=path,
        )
    conn.execute("BEGIN")  # one snapshot for the whole read
    return conn


def _rows(conn: sqlite3.Connection, table: str, sql: str) -> list[sqlite3.Row]:
    exists = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)).fetchone()
    return conn.execute(sql).fetchall() if exists else []


async def _import_items(conn: sqlite3.Connection, hive: workhive.Hive, report: ImportReport) -> None:
    imported = hive.shared(IMPORTED_NAMESPACE)
    done = await imported.items()
    rows = _rows(conn, "work_pool", "SELECT * FROM work_pool ORDER BY created_at, item_id")
    for row in rows:
        status, source_id = row["status"], row["item_id"]
        if status not in ("pending", "claimed"):
            report.items_left[status] = report.items_left.get(status, 0) + 1
            continue
        if source_id in done:
            report.items_already += 1
            continue
        what = f"item {source_id} (pool {row['pool_name']!r})"
        try:
            pool = hive.pool(row["pool_name"])
            data = json.loads(row["data"])
        except (WorkhiveError, ValueError, TypeError) as exc:
            report.skipped.append((what, str(exc)))
            continue
        left = max(1, (row["max_retries"] or 0) - (row["attempts"] or 0))
        if not report.dry_run:
            try:
                new_id = await pool.push(data, max_attempts=left, dedup_key=f"flatmachines:{source_id}")
            except WorkhiveError as exc:
                report.skipped.append((what, str(exc)))
                continue
            await imported.put(source_id, new_id)
        report.items_moved[pool.name] = report.items_moved.get(pool.name, 0) + 1
        if status == "claimed":
            report.claimed_released += 1


async def _import_workers(conn: sqlite3.Connection, hive: workhive.Hive, report: ImportReport) -> None:
    side = hive.shared(SIDE_NAMESPACE)
    for row in _rows(conn, "worker_registry", "SELECT * FROM worker_registry ORDER BY worker_id"):
        worker_id = row["worker_id"]
        what = f"worker {worker_id!r}"
        try:
            check_name("worker", worker_id)
            status = workhive_status(row["status"])
            capabilities = json.loads(row["capabilities"]) if row["capabilities"] else []
            metadata = json.loads(row["metadata"]) if row["metadata"] else None
            if not isinstance(capabilities, list) or not all(isinstance(c, str) for c in capabilities):
                raise InvalidArgument(f"capabilities {row['capabilities']!r} are not a list of strings")
        except (WorkhiveError, ValueError) as exc:
            report.skipped.append((what, str(exc)))
            continue
        if await hive.storage.get_worker(worker_id) is not None:
            report.workers_already += 1
            continue
        if not report.dry_run:
            pid = row["pid"] if isinstance(row["pid"], int) and row["pid"] > 0 else 0
            await hive.workers.register(
                worker_id=worker_id, host=row["host"] or "", pid=pid, capabilities=tuple(capabilities)
            )
            await hive.workers.update_status(worker_id, status)
            await side.put(
                worker_id,
                {"started_at": row["started_at"], "current_task_id": row["current_task_id"], "metadata": metadata},
            )
        report.workers_moved += 1


async def import_flatmachines(path: str, hive: workhive.Hive, *, dry_run: bool = False) -> ImportReport:
    """Move ``path``'s pending and claimed items and its workers into ``hive`` (open); returns the report.

    >>> async with workhive.open("sqlite:///.workhive/hive.db") as hive:  # doctest: +SKIP
    ...     report = await import_flatmachines("data/workers.sqlite", hive, dry_run=True)
    """
    conn = _open_source(path)
    report = ImportReport(source=path, dry_run=dry_run)
    try:
        await _import_items(conn, hive, report)
        await _import_workers(conn, hive, report)
    finally:
        conn.close()
    return report


def print_report(report: ImportReport, *, as_json: bool = False) -> None:
    """The report for a terminal, or as JSON."""
    if as_json:
        click.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
        return
    verb = "would move" if report.dry_run else "moved"
    total = sum(report.items_moved.values())
    items = f"{total} item{'s' if total != 1 else ''}"
    workers = f"{report.workers_moved} worker{'s' if report.workers_moved != 1 else ''}"
    click.echo(f"{report.source}: {verb} {items}, {workers}")
    for pool, count in sorted(report.items_moved.items()):
        click.echo(f"  pool {pool}: {count}")
    if report.claimed_released:
        click.echo(f"  {report.claimed_released} of them were claimed there and come back pending")
    if report.items_already or report.workers_already:
        click.echo(
            f"already in the hive (an earlier import): {report.items_already} items, {report.workers_already} workers"
        )
    if report.items_left:
        left = ", ".join(f"{n} {status}" for status, n in sorted(report.items_left.items()))
        click.echo(f"left behind (finished there): {left}")
    for what, why in report.skipped:
        click.echo(f"skipped {what}: {why}")
    if report.dry_run:
        click.echo("dry run: nothing was written")
