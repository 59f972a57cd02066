"""Worker processes for the multi-process and restart tests (run with ``spawn``)."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path
from typing import Any

import workhive
from workhive.errors import StorageError


def drain(url: str, worker: str, fused: bool, out: str, lease: float = 60.0) -> None:
    """Claim and complete until the pool stays empty; write each accepted completion as 'id token'."""

    async def run() -> None:
        async with workhive.open(url) as hive:
            pool = hive.pool("jobs")
            accepted: list[str] = []
            idle_since: float | None = None
            while True:
                try:
                    if fused:
                        item = await pool.claim(worker, lease=lease)
                        while item is not None:
                            nxt = await pool.complete_and_claim(item, {"by": worker}, worker, lease=lease)
                            accepted.append(f"{item.id} {item.token}")
                            item = nxt
                        batch = []
                    else:
                        batch = await pool.claim_many(10, worker, lease=lease)
                        if batch:
                            oks = await pool.complete_many([(i, None) for i in batch])
                            accepted += [f"{i.id} {i.token}" for i, ok in zip(batch, oks) if ok]
                except StorageError:
                    await asyncio.sleep(0.05)
                    continue
                if batch:
                    idle_since = None
                    continue
                if (await pool.stats()).pending == 0 and (await pool.stats()).claimed == 0:
                    return_lines(out, accepted)
                    return
                idle_since = idle_since or time.monotonic()
                await pool.wait_for_work(0.2)

    asyncio.run(run())


def return_lines(path: str, lines: list[str]) -> None:
    Path(path).write_text("".join(f"{line}\n" for line in lines))


def flaky_drain(url: str, worker: str, out: str, stop_file: str) -> None:
    """Work through a server that restarts: record accepted completions as they happen (appended, flushed).

    Every StorageError (refused, unreachable, outcome unknown) is survived with a
    short pause; a claim whose outcome is unknown comes back when its lease ends.
    """

    async def run() -> None:
        async with workhive.open(url, max_attempts=1000) as hive:
            pool = hive.pool("jobs")
            log = _append_log(out)
            try:
                while not _exists(stop_file):
                    try:
                        batch = await pool.claim_many(5, worker, lease=2.0)
                        if not batch:
                            await pool.wait_for_work(0.2)
                            continue
                        oks = await pool.complete_many([(i, None) for i in batch])
                    except StorageError:
                        await asyncio.sleep(0.05)
                        continue
                    log.write("".join(f"{item.id} {item.token}\n" for item, ok in zip(batch, oks) if ok))
            finally:
                log.close()

    asyncio.run(run())


def hold_and_hang(url: str, ready_file: str) -> None:
    """Claim three items and take a lock, report them, then hang until killed."""

    async def run() -> None:
        async with workhive.open(url, locks=url) as hive:
            pool = hive.pool("jobs")
            items = await pool.claim_many(3, "doomed", lease=2.0)
            held = await hive.locks().acquire("shared", ttl=60, timeout=10, worker_id="doomed")
            lines = [f"lock {held.token}"] + [f"item {i.id} {i.token}" for i in items]
            _publish(ready_file, "\n".join(lines) + "\n")
            await asyncio.sleep(3600)

    asyncio.run(run())


def _append_log(path: str) -> Any:
    return open(path, "a", buffering=1)  # line-buffered: the test counts progress while we run


def _exists(path: str) -> bool:
    return os.path.exists(path)


def _publish(path: str, text: str) -> None:
    Path(path + ".tmp").write_text(text)
    os.replace(path + ".tmp", path)
