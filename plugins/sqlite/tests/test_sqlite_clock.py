"""Hive time: wall-clock steps and disagreeing processes neither stall a fleet nor double a lease.

No real clock is changed: each "process" is a SqliteStorage on the same file
with an injected wall clock (and, for reboots, an injected monotonic clock and
boot id).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

import workhive
from workhive.models import WorkerRegistration
from workhive_sqlite import SqliteStorage
from workhive_sqlite.clock import TimeSources, read_boot_id


class SteppingWall:
    """A wall clock an administrator (or NTP) can step: the real one plus ``shift`` seconds."""

    def __init__(self, shift: float = 0.0) -> None:
        self.shift = shift

    def __call__(self) -> float:
        return time.time() + self.shift


def _storage(path: Path, wall: SteppingWall, **sources: object) -> SqliteStorage:
    return SqliteStorage(f"sqlite:///{path}", time_sources=TimeSources(wall=wall, **sources))  # type: ignore[arg-type]


@pytest.mark.asyncio
async def test_a_wall_clock_step_in_either_direction_changes_nothing(tmp_path: Path) -> None:
    wall = SteppingWall()
    async with workhive.Hive(_storage(tmp_path / "hive.db", wall)) as hive:
        pool = hive.pool("jobs")
        await pool.push_many(["a", "b", "c"])
        before = await hive.now()
        wall.shift = -600  # stepped back ten minutes
        # Nothing looks delayed: the items are claimable at once.
        first = await pool.claim("w", lease=30.0)
        assert first is not None and first.data == "a"
        assert await hive.now() >= before
        wall.shift = +3600  # stepped an hour ahead
        # The lease did not expire with the step: nobody else can claim the item.
        second = await pool.claim("other", lease=30.0)
        assert second is not None and second.data == "b"
        assert (await pool.stats()).claimed == 2
        await pool.complete(first, "ok")
        await pool.complete(second, "ok")
        assert (await pool.stats()).done == 2


@pytest.mark.asyncio
async def test_processes_whose_wall_clocks_are_an_hour_apart_share_one_time(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    async with (
        workhive.Hive(_storage(path, SteppingWall(0.0)), reap_after=30.0) as here,
        workhive.Hive(_storage(path, SteppingWall(+3600.0)), reap_after=30.0) as ahead,
    ):
        # Within the same monotonic instant, give or take the calls between them.
        assert abs(await ahead.now() - await here.now()) < 60
        # Pushed by the process whose clock runs ahead: not parked an hour in the future.
        await ahead.pool("jobs").push("from the future")
        item = await here.pool("jobs").claim("w-here", lease=30.0)
        assert item is not None and item.data == "from the future"
        # A lease taken by one is unexpired for the other: no second claim.
        await here.pool("jobs").push("next")
        other = await ahead.pool("jobs").claim("w-ahead", lease=30.0)
        assert other is not None and other.data == "next"
        assert await ahead.pool("jobs").claim("w-ahead") is None
        # A live worker registered by one is not reaped by the other (nor by itself).
        await here.storage.register_worker(WorkerRegistration(worker_id="w-here", pools=("jobs",)))
        await ahead.storage.register_worker(WorkerRegistration(worker_id="w-ahead", pools=("jobs",)))
        assert await ahead.storage.reap(30.0) == []
        assert await here.storage.reap(30.0) == []


@pytest.mark.asyncio
async def test_after_a_reboot_with_the_wall_clock_behind_time_never_runs_backward(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    mono = [5000.0]
    first_boot = _storage(path, SteppingWall(0.0), monotonic=lambda: mono[0], boot_id=lambda: "boot-1")
    async with workhive.Hive(first_boot) as hive:
        pool = hive.pool("jobs")
        await pool.push("held")
        held = await pool.claim("crashed-worker", lease=30.0)
        assert held is not None
        stored_at = await hive.now()
        expires = held.lease_expires_at
        assert expires is not None
    # Rebooted: the monotonic clock starts again near zero, and the wall clock is an hour behind.
    mono[0] = 3.0
    second_boot = _storage(path, SteppingWall(-3600.0), monotonic=lambda: mono[0], boot_id=lambda: "boot-2")
    async with workhive.Hive(second_boot) as hive:
        pool = hive.pool("jobs")
        assert await hive.now() >= stored_at
        # The dead fleet's claim is not stuck an hour away: it expires 30 s of hive time later.
        assert await pool.claim("survivor") is None
        mono[0] += 31.0
        assert await hive.now() > expires
        rescued = await pool.claim("survivor")
        assert rescued is not None and rescued.id == held.id and rescued.token == held.token + 1


@pytest.mark.asyncio
async def test_a_process_of_the_same_boot_adopts_the_stored_anchor(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    mono = [100.0]
    early = _storage(path, SteppingWall(0.0), monotonic=lambda: mono[0], boot_id=lambda: "boot")
    async with workhive.Hive(early) as hive:
        anchored = await hive.now()
    mono[0] = 160.0
    late = _storage(path, SteppingWall(-86400.0), monotonic=lambda: mono[0], boot_id=lambda: "boot")
    async with workhive.Hive(late) as hive:
        # 60 s of monotonic time later, whatever the wall clock says now.
        assert await hive.now() == pytest.approx(anchored + 60.0)


def test_the_boot_id_is_the_kernels_on_linux() -> None:
    boot = read_boot_id()
    assert boot and boot == read_boot_id()


@pytest.mark.asyncio
async def test_the_anchor_is_stored_in_the_file_and_the_time_seen_is_recorded_at_close(tmp_path: Path) -> None:
    path = tmp_path / "hive.db"
    mono = [50.0]
    storage = _storage(path, SteppingWall(0.0), monotonic=lambda: mono[0], boot_id=lambda: "boot-x")
    async with workhive.Hive(storage) as hive:
        anchored_at = await hive.now()
        mono[0] += 25.0
        closing_at = await hive.now()
    with sqlite3.connect(path) as conn:
        boot, offset, seen = conn.execute("SELECT boot_id, offset, seen FROM clock").fetchone()
    conn.close()
    assert boot == "boot-x" and offset + 50.0 == pytest.approx(anchored_at)
    assert seen == pytest.approx(closing_at)
