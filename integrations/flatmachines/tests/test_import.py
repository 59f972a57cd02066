"""`workhive import flatmachines PATH.db`: a flatmachines SQLite file's live work and workers, moved once."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from flatmachines.distributed import SQLiteRegistrationBackend, SQLiteWorkBackend, WorkerRegistration

import workhive
from workhive_flatmachines import WorkhiveRegistrationBackend, import_flatmachines


async def flatmachines_db(path: Path) -> None:
    """A flatmachines database with a claimed, pending and poisoned item, and three workers."""
    db = str(path)
    work, registry = SQLiteWorkBackend(db_path=db), SQLiteRegistrationBackend(db_path=db)
    papers = work.pool("papers")
    await papers.push({"paper": 1})
    await papers.push({"paper": 2}, {"max_retries": 5})
    await papers.push({"paper": 3})
    await papers.push({"paper": 4}, {"max_retries": 1})
    await work.pool("images").push({"image": 1})
    claims = [await papers.claim("w-busy") for _ in range(4)]  # papers 1-4, one attempt each
    await papers.complete(claims[2].id)  # type: ignore[union-attr]  # flatmachines deletes it
    await papers.fail(claims[3].id, "bad paper")  # type: ignore[union-attr]  # poisoned: 1 of 1 attempts
    await papers.release_by_worker("w-busy")  # papers 1 and 2 pending again
    await papers.claim("w-busy")  # paper 1 claimed, attempt 2 of 3
    await registry.register(WorkerRegistration(worker_id="w-busy", host="box", pid=42, capabilities=["pdf"]))
    await registry.heartbeat("w-busy", {"load": 0.7})
    await registry.register(WorkerRegistration(worker_id="w-gone", host="box", pid=43))
    await registry.update_status("w-gone", "terminated")
    await registry.register(WorkerRegistration(worker_id="w lost"))  # a name workhive refuses


def statuses(path: Path) -> dict[str, int]:
    with sqlite3.connect(path) as conn:
        return dict(conn.execute("SELECT status, COUNT(*) FROM work_pool GROUP BY status").fetchall())


@pytest.mark.asyncio
async def test_import_moves_live_items_and_workers_once(tmp_path: Path) -> None:
    source = tmp_path / "workers.sqlite"
    await flatmachines_db(source)
    before = source.read_bytes()
    assert statuses(source) == {"pending": 2, "claimed": 1, "poisoned": 1}
    async with workhive.open("memory://") as hive:
        dry = await import_flatmachines(str(source), hive, dry_run=True)
        assert await hive.pools() == [] and await hive.workers.list() == []
        report = await import_flatmachines(str(source), hive)
        assert report.items_moved == dry.items_moved == {"papers": 2, "images": 1}
        assert report.claimed_released == 1
        assert report.items_left == {"poisoned": 1}
        assert (report.workers_moved, len(report.skipped)) == (2, 1)
        assert "'w lost'" in report.skipped[0][0]
        papers = await hive.pool("papers").items("pending")
        # attempts left: paper 1 used 2 of 3, paper 2 used 1 of 5
        assert sorted((i.data["paper"], i.max_attempts) for i in papers) == [(1, 1), (2, 4)]
        assert await hive.pool("images").size() == 1
        registry = WorkhiveRegistrationBackend(hive)
        busy = await registry.get("w-busy")
        assert busy is not None
        assert (busy.status, busy.host, busy.pid, busy.capabilities, busy.metadata) == (
            "active",
            "box",
            42,
            ["pdf"],
            {"load": 0.7},
        )
        assert (await registry.get("w-gone")).status == "terminated"  # type: ignore[union-attr]

        again = await import_flatmachines(str(source), hive)
        assert (again.items_moved, again.items_already, again.workers_moved, again.workers_already) == ({}, 3, 0, 2)
        assert await hive.pool("papers").size() == 2
    assert source.read_bytes() == before  # only read


@pytest.mark.asyncio
async def test_attempts_left_carry_over(tmp_path: Path) -> None:
    source = tmp_path / "workers.sqlite"
    work = SQLiteWorkBackend(db_path=str(source))
    await work.pool("jobs").push({"n": 1}, {"max_retries": 5})
    for _ in range(2):
        await work.pool("jobs").fail((await work.pool("jobs").claim("w")).id, "x")  # type: ignore[union-attr]
    async with workhive.open("memory://") as hive:
        await import_flatmachines(str(source), hive)
        (item,) = await hive.pool("jobs").items("pending")
        assert (item.attempts, item.max_attempts) == (0, 3)


@pytest.mark.parametrize(
    ("make", "says"),
    [
        (lambda p: None, "no such file"),
        (lambda p: p.write_text("not a database at all, just text" * 10), "not a SQLite database"),
        (lambda p: sqlite3.connect(p).execute("CREATE TABLE other (x)").connection.commit(), "not a flatmachines"),
    ],
)
def test_the_cli_refuses_what_is_not_a_flatmachines_database(tmp_path: Path, make, says: str) -> None:  # type: ignore[no-untyped-def]
    source = tmp_path / "x.db"
    make(source)
    hive = tmp_path / "hive.db"
    result = workhive_cli("--storage", f"sqlite:///{hive}", "import", "flatmachines", str(source))
    assert result.returncode == 2
    assert says in result.stderr and "Traceback" not in result.stderr


def workhive_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "workhive", *args], capture_output=True, text=True, timeout=120)


def test_the_cli_reports_and_dry_runs(tmp_path: Path) -> None:
    source = tmp_path / "workers.sqlite"
    asyncio.run(flatmachines_db(source))
    storage = f"sqlite:///{tmp_path / 'hive.db'}"
    dry = workhive_cli("--storage", storage, "import", "flatmachines", str(source), "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would move 3 items, 2 workers" in dry.stdout and "dry run: nothing was written" in dry.stdout
    done = workhive_cli("--storage", storage, "import", "flatmachines", str(source), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["items_moved"], report["workers_moved"], report["dry_run"]) == ({"images": 1, "papers": 2}, 2, False)
    again = workhive_cli("--storage", storage, "import", "flatmachines", str(source))
    assert "moved 0 items, 0 workers" in again.stdout and "already in the hive" in again.stdout
