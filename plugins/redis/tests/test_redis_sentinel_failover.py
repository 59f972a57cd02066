"""A fleet drains through ``redis+sentinel://`` while the master is SIGKILLed and its replica promoted.

Issue 26: every item DONE (at-least-once across the failover, the stored
result from the item's final claim), none left claimed, and the fleet
(``workhive work --until-empty``) neither crashes nor exits early. The kill
lands after ``KILL_AFTER`` handler runs, counted in the handlers' log; every
wait is for a condition, with a generous deadline. The figures (items,
duplicates, lost, seconds of stall) are printed for the README and the report.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from redis_sentinel_server import SentinelSetup

import workhive
from workhive.models import Ack, ItemState, WorkerRegistration

HERE = Path(__file__).resolve().parent
ITEMS = 600
KILL_AFTER = 150
DEADLINE = 240.0  # generous: the machine is shared; nothing here measures time


@pytest.fixture
def sentinels(tmp_path: Path) -> Iterator[SentinelSetup]:
    setup = SentinelSetup(tmp_path / "servers")
    try:
        setup.start()
        yield setup
    finally:
        setup.stop()


def _runs(log: Path) -> list[tuple[str, int, float]]:
    if not log.exists():
        return []
    rows = []
    for line in log.read_text().splitlines():
        item_id, token, at = line.split()
        rows.append((item_id, int(token), float(at)))
    return rows


def _report(out: str) -> str:
    """What the fleet's --json report says it did (for the printed figures)."""
    try:
        report = json.loads(out)
    except ValueError:
        return "(no JSON report)"
    return ", ".join(f"{k} {v}" for k, v in report.items() if isinstance(v, int))


async def _push(url: str, n: int) -> list[str]:
    async with workhive.open(url) as hive:
        return await hive.pool("jobs").push_many([{"n": i} for i in range(n)])


async def _final(url: str, ids: list[str]) -> tuple[list[workhive.WorkItem | None], object]:
    async with workhive.open(url, create=False) as hive:
        pool = hive.pool("jobs")
        return [await pool.get(i) for i in ids], await pool.stats()


def test_a_fleet_drains_across_a_master_killed_and_its_replica_promoted(
    sentinels: SentinelSetup, tmp_path: Path
) -> None:
    url = sentinels.url("wh-failover", retry_for=60)
    ids = asyncio.run(_push(url, ITEMS))
    assert len(ids) == ITEMS
    # The pushes are on the replica before anything runs: what the failover may lose is then
    # only what the fleet writes, which is what this test is about (the README says what a push loses).
    sentinels.replicate_everything()
    log = tmp_path / "runs.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    env["WORKHIVE_SENTINEL_LOG"] = str(log)
    env["WORKHIVE_SENTINEL_SLEEP"] = "0.01"
    proc = subprocess.Popen(
        [sys.executable, "-m", "workhive", "--storage", url, "work", "jobs",
         "--handler", "redis_sentinel_handlers:logged", "--processes", "2", "--concurrency", "2",
         "--lease", "10", "--heartbeat", "1", "--max-attempts", "20",
         "--until-empty", "--progress", "none", "--json"],
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + DEADLINE
    try:
        while len(_runs(log)) < KILL_AFTER:
            assert proc.poll() is None, f"the fleet exited before the kill: {proc.communicate()[1][-3000:]}"
            assert time.monotonic() < deadline, f"only {len(_runs(log))} handler runs"
            time.sleep(0.01)
        killed_at = time.time()
        sentinels.kill_master()
        runs_at_kill = len(_runs(log))
        sentinels.wait_for_promotion()
        out, err = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    items, stats = asyncio.run(_final(url, ids))
    runs = _runs(log)
    counts = Counter(item_id for item_id, _, _ in runs)
    duplicates = sum(c - 1 for c in counts.values())
    lost = sum(1 for i in items if i is None)
    starts = sorted(at for _, _, at in runs)
    # The longest wait between two handler starts once the master was gone.
    stall = max((b - a for a, b in itertools.pairwise(starts) if b >= killed_at), default=0.0)
    print(
        f"\nsentinel failover: items {ITEMS}, handler runs {len(runs)}, duplicates {duplicates}, lost {lost}, "
        f"stall {stall:.1f} s (longest gap between handler starts after the SIGKILL), kill after "
        f"{runs_at_kill} runs; fleet exit {proc.returncode}, its report: {_report(out)}; stored: {stats}"
    )

    assert proc.returncode == 0, err[-3000:]
    assert runs_at_kill < ITEMS, "the fleet finished before the kill landed"
    not_done = [i for i in items if i is None or i.state is not ItemState.DONE]
    assert not not_done, f"{len(not_done)} items not DONE: {not_done[:3]}"
    assert (stats.pending, stats.claimed, stats.poisoned, stats.done) == (0, 0, 0, ITEMS)  # type: ignore[attr-defined]
    # The stored result is the final claim's: no completion from an earlier claim won.
    assert all(i.result["token"] == i.token for i in items if i is not None)
    assert set(counts) == set(ids), "a handler ran for an item that was never pushed, or never ran for one"


def test_a_completion_the_promoted_replica_never_received_is_given_back_by_the_next_heartbeat(
    sentinels: SentinelSetup,
) -> None:
    """The replica is stopped (SIGSTOP) and cut off while the master acknowledges a completion, then the
    master is killed: the promoted replica still has the item claimed by the live worker. Its next heartbeat would
    extend that lease for ever; instead it releases the claim (fenced, no attempt spent), and it runs again."""
    url = sentinels.url("wh-lost-completion", retry_for=60)

    def lose_the_master() -> None:
        replica = sentinels.replica.process
        assert replica is not None
        try:
            sentinels.kill_master()
        finally:
            replica.send_signal(signal.SIGCONT)
        sentinels.wait_for_promotion()

    async def main() -> None:
        async with workhive.open(url) as hive:
            backend = hive.storage
            pool = hive.pool("jobs")
            await backend.register_worker(WorkerRegistration(worker_id="w1", pools=("jobs",)))
            await pool.push_many([{"n": 1}, {"n": 2}])
            lost, kept = await backend.claim("jobs", "w1", 2, 30.0)
            await backend.heartbeat("w1")
            await asyncio.to_thread(sentinels.replicate_everything)  # the claims are on the replica
            assert sentinels.replica.process is not None
            # Stopped, and its link closed by the master: nothing written from now on reaches it
            # (what the master had sent already is in the replica's socket, and arrives).
            sentinels.replica.process.send_signal(signal.SIGSTOP)
            await asyncio.to_thread(sentinels.cut_replica_link)
            assert await backend.complete("jobs", [Ack(lost.id, lost.token, '"lost"')]) == [True]
            await asyncio.to_thread(lose_the_master)

            await backend.heartbeat("w1")  # reaches the promoted replica
            after = await pool.get(lost.id)
            assert after is not None and after.state is ItemState.PENDING, after
            still = await pool.get(kept.id)  # this process still works on it: its claim stays
            assert still is not None and still.state is ItemState.CLAIMED and still.token == kept.token
            [again] = await backend.claim("jobs", "w2", 1, 30.0)
            assert again.id == lost.id and again.token > lost.token
            assert await backend.complete("jobs", [Ack(again.id, again.token, '"again"'), Ack(kept.id, kept.token)])
            assert (await pool.stats()).done == 2

    asyncio.run(main())
