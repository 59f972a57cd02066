"""fcntl locks across real processes: mutual exclusion under cleaning, and dead holders."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from workhive.errors import LockTimeout
from workhive_fcntl_locks import FcntlLocks

WORKER = str(Path(__file__).with_name("lock_worker.py"))
PROCESSES = 16
PER_PROCESS = int(os.environ.get("WORKHIVE_LOCK_STRESS_N", "200"))


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, WORKER, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sixteen_processes_never_overlap_and_tokens_rise_while_files_are_cleaned(tmp_path: Path) -> None:
    lockdir, shared, log, stop = (str(tmp_path / p) for p in ("locks", "shared", "log", "stop"))
    cleaner = spawn("clean", lockdir, stop)
    workers = [spawn("stress", lockdir, shared, log, str(PER_PROCESS)) for _ in range(PROCESSES)]
    try:
        outputs = [w.communicate(timeout=120) for w in workers]
    finally:
        Path(stop).touch()
        cleaner_out, cleaner_err = cleaner.communicate(timeout=30)
        for w in workers:
            w.kill()
    for w, (out, err) in zip(workers, outputs):
        assert w.returncode == 0, err
        assert out.strip() == "violations 0"
    assert cleaner.returncode == 0, cleaner_err
    assert int(cleaner_out.split()[1]) > 0, "the cleaner never deleted a lock file; the test proved less than it says"

    lines = Path(log).read_text().splitlines()
    assert len(lines) == PROCESSES * PER_PROCESS
    tokens = [int(line.split()[0]) for line in lines]
    assert all(a < b for a, b in itertools.pairwise(tokens)), "fencing tokens must rise in acquisition order"


@pytest.mark.asyncio
async def test_a_sigkilled_holder_frees_the_lock_for_the_next_waiter(tmp_path: Path) -> None:
    lockdir = str(tmp_path / "locks")
    holder = await asyncio.create_subprocess_exec(
        sys.executable, WORKER, "hold", lockdir, "victim", stdout=asyncio.subprocess.PIPE
    )
    try:
        assert holder.stdout is not None
        line = await asyncio.wait_for(holder.stdout.readline(), 30)
        assert line.startswith(b"held ")
        dead_token = int(line.split()[1])
        locks = FcntlLocks(lockdir)
        with pytest.raises(LockTimeout, match=f"pid {holder.pid} "):
            await locks.acquire("victim", ttl=None, timeout=0, worker_id=None)
        holder.send_signal(signal.SIGKILL)
        await holder.wait()
        held = await locks.acquire("victim", ttl=None, timeout=5, worker_id="next")
        assert held.token > dead_token
        assert (await locks.holder("victim")).pid == os.getpid()  # type: ignore[union-attr]
        await locks.release(held)
        await locks.close()
    finally:
        if holder.returncode is None:
            holder.kill()
            await holder.wait()


@pytest.mark.asyncio
async def test_a_crashed_holder_is_not_reported_as_holding(tmp_path: Path) -> None:
    lockdir = str(tmp_path / "locks")
    holder = await asyncio.create_subprocess_exec(
        sys.executable, WORKER, "hold", lockdir, "crashed", stdout=asyncio.subprocess.PIPE
    )
    assert holder.stdout is not None
    await asyncio.wait_for(holder.stdout.readline(), 30)
    holder.kill()
    await holder.wait()
    locks = FcntlLocks(lockdir)
    # Its record still says "held", but nobody holds the flock: not a holder.
    assert await locks.holder("crashed") is None
    assert await locks.list_locks() == []
