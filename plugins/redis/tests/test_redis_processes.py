"""Many processes, a server that restarts, a worker that dies: every item done once, no stale completion.

No timing assertions: every wait is for a condition, with a generous deadline.
"""

from __future__ import annotations

import asyncio
import multiprocessing as mp
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import attrs
import pytest
import redis_workers
from redis_server import PrivateRedis, new_prefix, url_for

import workhive
from workhive.errors import LeaseLost
from workhive.models import Ack, ItemState

HERE = Path(__file__).resolve().parent


async def _push(url: str, n: int) -> list[str]:
    async with workhive.open(url) as hive:
        ids: list[str] = []
        for start in range(0, n, 5000):
            ids += await hive.pool("jobs").push_many([{"n": i} for i in range(start, min(n, start + 5000))])
        return ids


async def _final(url: str) -> tuple[dict[str, tuple[ItemState, int]], object]:
    async with workhive.open(url, create=False) as hive:
        pool = hive.pool("jobs")
        stats = await pool.stats()
        done = await pool.items(ItemState.DONE, limit=100_000)
        return {i.id: (i.state, i.token) for i in done}, stats


def _spawn(target: object, *args: object) -> mp.process.BaseProcess:
    ctx = mp.get_context("spawn")
    proc = ctx.Process(target=target, args=args)
    proc.start()
    return proc


def test_eight_processes_drain_forty_thousand_items_each_exactly_once(tmp_path: Path) -> None:
    url = url_for(new_prefix())
    ids = asyncio.run(_push(url, 40_000))
    outs = [tmp_path / f"w{i}.txt" for i in range(8)]
    procs = [_spawn(redis_workers.drain, url, f"p{i}", i % 2 == 0, str(outs[i])) for i in range(8)]
    for proc in procs:
        proc.join(timeout=600)
        assert proc.exitcode == 0, f"worker process exited with {proc.exitcode}"
    accepted = [line.split()[0] for out in outs for line in out.read_text().splitlines()]
    counts = Counter(accepted)
    assert len(counts) == len(ids) and set(counts) == set(ids), "an item was lost or invented"
    assert max(counts.values()) == 1, f"completed twice: {[i for i, c in counts.items() if c > 1][:5]}"
    done, stats = asyncio.run(_final(url))
    assert len(done) == 40_000 and all(state is ItemState.DONE for state, _ in done.values())
    assert (stats.pending, stats.claimed, stats.poisoned, stats.done) == (0, 0, 0, 40_000)  # type: ignore[attr-defined]


def test_a_server_killed_and_restarted_during_a_drain_loses_nothing(tmp_path: Path) -> None:
    server = PrivateRedis(tmp_path)
    server.start()
    try:
        url = url_for("restart", base=server.url, retry_for=60)
        total = 3000
        ids = asyncio.run(_push(url, total))
        stop = tmp_path / "stop"
        outs = [tmp_path / f"w{i}.txt" for i in range(4)]
        procs = [_spawn(redis_workers.flaky_drain, url, f"p{i}", str(outs[i]), str(stop)) for i in range(4)]

        def progress() -> int:
            return sum(len(o.read_text().splitlines()) for o in outs if o.exists())

        kills = 0
        for threshold in (total // 5, total * 2 // 5, total * 3 // 5):
            deadline = time.monotonic() + 120
            while progress() < threshold:
                assert time.monotonic() < deadline, f"no progress past {progress()} items"
                assert all(p.is_alive() for p in procs), "a worker process died"
                time.sleep(0.01)
            server.kill()
            kills += 1
            time.sleep(0.2)  # workers meet a dead server for a moment
            server.start()
        deadline = time.monotonic() + 180
        while True:
            done, stats = asyncio.run(_final(url))
            if len(done) == total:
                break
            assert time.monotonic() < deadline, f"only {len(done)} of {total} items done: {stats}"
            time.sleep(0.2)
        stop.touch()
        for proc in procs:
            proc.join(timeout=60)
            assert proc.exitcode == 0
        assert kills == 3
        accepted = [tuple(line.split()) for out in outs for line in out.read_text().splitlines()]
        counts = Counter(item_id for item_id, _ in accepted)
        assert max(counts.values()) == 1, "an item's completion was accepted twice"
        assert set(done) == set(ids) and all(state is ItemState.DONE for state, _ in done.values())
        # Every accepted completion carried the token the item was finished with: no stale one got in.
        for item_id, token in accepted:
            assert done[item_id][1] == int(token), f"{item_id}: accepted token {token}, stored {done[item_id][1]}"
        assert stats.poisoned == 0  # type: ignore[attr-defined]
    finally:
        server.stop()


def test_a_killed_worker_gives_back_its_claims_and_its_lock_and_its_late_completion_is_refused(
    tmp_path: Path,
) -> None:
    url = url_for(new_prefix(), lease=1)
    asyncio.run(_push(url, 5))
    ready = tmp_path / "ready"
    code = (
        f"import sys; sys.path.insert(0, {str(HERE)!r}); import redis_workers as w; "
        f"w.hold_and_hang({url!r}, {str(ready)!r})"
    )
    child = subprocess.Popen([sys.executable, "-c", code])
    try:
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert child.poll() is None, "the doomed worker exited early"
            assert time.monotonic() < deadline, "the doomed worker never got ready"
            time.sleep(0.02)
        lines = ready.read_text().split("\n")
        dead_token = int(lines[0].split()[1])
        held = [(parts[1], int(parts[2])) for parts in (line.split() for line in lines[1:] if line)]
        assert len(held) == 3
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)

    async def after() -> None:
        async with workhive.open(url, locks=url) as hive:
            # The lock frees itself once the dead holder stops renewing it.
            async with hive.lock("shared", timeout=60, worker_id="survivor") as lock:
                assert lock.token > dead_token
            pool = hive.pool("jobs")
            back: dict[str, int] = {}
            deadline = time.monotonic() + 60
            while len(back) < 5:
                assert time.monotonic() < deadline, f"items never came back: {back}"
                for item in await pool.claim_many(5, "survivor", lease=60.0):
                    back[item.id] = item.token
                if len(back) < 5:
                    await pool.wait_for_work(1.0)
            for item_id, token in held:
                assert back[item_id] > token
                refused = await hive.storage.complete("jobs", [Ack(item_id, token, '"late"')])
                assert refused == [False]
                # The dead worker's claim, presented late through the public API.
                late = attrs.evolve(await pool.get(item_id), token=token, claimed_by="doomed")
                with pytest.raises(LeaseLost):
                    await pool.complete(late, "late")
                assert (await pool.get(item_id)).state is ItemState.CLAIMED

    asyncio.run(after())
    assert os.path.exists(ready)
