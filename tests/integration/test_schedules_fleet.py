"""A running ``workhive work`` supervisor fires the hive's schedules; three of them push each tick once.

Observed through the hive: the items' count against the schedule's own record of its latest tick
(every tick from its creation to that one is pushed exactly once), never by timing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import workhive
from workhive.models import ItemState, WorkerFilter, WorkerStatus
from workhive.testing.environment import workhive_free_env
from workhive.testing.services import isolated_store

from .cli_helpers import COMMAND
from .cli_helpers import workhive as run_workhive

pytest.importorskip("workhive_sqlite")
pytestmark = pytest.mark.one_python  # whole fleets: once in the Python matrix

HERE = Path(__file__).parent
PATIENCE = 240.0


async def _read(url: str) -> tuple[int, float | None, float]:
    """(items in the pool, the schedule's latest tick, its creation time)."""
    async with workhive.open(url, create=False) as hive:
        schedule = await hive.schedules().get("tick")
        stats = await hive.pool("ticks").stats()
        return stats.total, schedule.last_tick, schedule.created_at


async def _registered(url: str) -> int:
    """Workers registered and not stopped (one per supervisor here: --processes 1)."""
    async with workhive.open(url, create=False) as hive:
        records = await hive.storage.list_workers(WorkerFilter())
        return sum(1 for r in records if r.status != WorkerStatus.STOPPED)


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with isolated_store(request.param, tmp_path) as found:
        yield found


def test_three_supervisors_fire_every_tick_once(tmp_path: Path, url: str) -> None:
    added = run_workhive(tmp_path, "--storage", url, "schedule", "add", "ticks", "--every", "1s", "--name", "tick",
                         "--catch-up", "1000", "--data", '{"from": "schedule"}', "--json")  # fmt: skip
    assert added.code == 0, added.err
    env = workhive_free_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    # The supervisors fire into "ticks" while working another pool: firing does not depend on the pool worked.
    command = [*COMMAND, "--storage", url, "work", "other", "--handler", "autoscale_handlers:quick"]
    command += ["--processes", "1", "--progress", "none"]
    procs = [
        subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    try:
        deadline = time.monotonic() + PATIENCE
        total = 0
        workers = 0
        # Every supervisor up (its worker registered, so its SIGTERM handler is in place: the
        # supervisor sets it before it starts a worker) and five ticks pushed. A SIGTERM sent to a
        # supervisor still importing would kill it (exit -15) instead of stopping it.
        while time.monotonic() < deadline and (total < 5 or workers < len(procs)):
            for proc in procs:
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
            total, _, _ = asyncio.run(_read(url))
            workers = asyncio.run(_registered(url))
            time.sleep(0.2)
        assert total >= 5, f"the supervisors pushed {total} ticks"
        assert workers == len(procs), f"{workers} of {len(procs)} supervisors' workers registered"
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            proc.wait(PATIENCE)
    total, last_tick, created_at = asyncio.run(_read(url))
    assert last_tick is not None
    # Catch-up 1000 covers every tick, so each from the first to the last recorded is pushed once.
    assert total == round(last_tick - created_at), (total, last_tick, created_at)

    async def data() -> list[object]:
        async with workhive.open(url, create=False) as hive:
            return [item.data for item in await hive.pool("ticks").items(ItemState.PENDING, limit=1000)]

    assert set(json.dumps(d) for d in asyncio.run(data())) == {'{"from": "schedule"}'}
    for proc in procs:
        assert proc.returncode == 0
