"""A fleet whose Redis dies for good mid-run: it ends with the storage fault as its reason and blames no item.

A private ``redis-server`` (never the shared one) with an append-only file is killed while
``workhive work`` drains it, then started again on the same files to look at what the fleet left:
no item was charged for the worker processes that stopped because storage was gone, none was
marked a crash suspect, nothing was lost. How long the stop may wait on the dead store is checked
in-process, by counting calls (test_stop_on_dead_storage.py); here the run must simply end.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import workhive
from workhive.models import ItemState

from .cli_helpers import COMMAND, clean_env
from .conftest import HERE

pytest.importorskip("workhive_redis")
# A whole fleet and a private server: once in the Python matrix (the stop on a dead store is checked
# in-process on every Python, test_stop_on_dead_storage.py).
pytestmark = pytest.mark.one_python

TIMEOUT = 300
ITEMS = 300
_SERVER = HERE.parents[1] / "plugins" / "redis" / "tests" / "redis_server.py"


@pytest.fixture
def private_redis(tmp_path: Path) -> Any:
    # In this repository, never optional: a renamed helper once skipped this test for good.
    assert _SERVER.exists(), f"{_SERVER} is missing: the private Redis server helper moved"
    spec = importlib.util.spec_from_file_location("workhive_test_private_redis", _SERVER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    directory = tmp_path / "redis"
    directory.mkdir()
    server = module.PrivateRedis(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _state(url: str) -> tuple[list[Any], dict[str, Any]]:
    async def read() -> tuple[list[Any], dict[str, Any]]:
        async with workhive.open(url, create=False) as hive:
            pool = hive.pool("jobs")
            items = [i for state in ItemState for i in await pool.items(state, limit=ITEMS + 10)]
            return items, await hive.shared("workhive-suspects").items()

    return asyncio.run(read())


def test_a_fleet_on_a_redis_that_dies_ends_on_the_storage_fault_and_blames_no_item(
    tmp_path: Path, private_redis: Any
) -> None:
    url = f"{private_redis.url}?retry_for=1&prefix=wht-death"

    async def push() -> None:
        async with workhive.open(url) as hive:
            await hive.pool("jobs").push_many([{"n": n} for n in range(ITEMS)])

    asyncio.run(push())
    log = tmp_path / "handler.log"
    log.touch()
    env = {"PYTHONPATH": str(HERE), "WORKHIVE_TEST_LOG": str(log), "WORKHIVE_TEST_SLEEP": "0.05"}
    proc = subprocess.Popen(
        [*COMMAND, "--storage", url, "work", "jobs", "--handler", "handlers:tokened", "--processes", "2",
         "--concurrency", "2", "--max-attempts", "3", "--grace", "5", "--until-empty", "--progress", "none", "--json"],
        cwd=tmp_path, env=clean_env(**env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline and len(log.read_text().splitlines()) < 20 and proc.poll() is None:
            time.sleep(0.05)
        assert proc.poll() is None and len(log.read_text().splitlines()) >= 20, "the fleet never got going"
        private_redis.kill()  # for good, while items are in flight
        out, err = proc.communicate(timeout=TIMEOUT)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, err[-3000:]
    report = json.loads(out)
    assert "storage" in report["reason"] and "Redis" in report["reason"], report
    # Processes that stopped because storage was gone are no item's crash.
    for blame in ("runs alone", "running this item alone", "crash suspect", "died ("):
        assert blame not in err, f"{blame!r} in the fleet's error output:\n{err[-3000:]}"

    private_redis.start()  # the same files: what the fleet left behind
    items, suspects = _state(url)
    assert suspects == {}
    assert len(items) == ITEMS  # nothing lost
    assert not [i for i in items if i.state is ItemState.POISONED or i.attempts > 1], "an item was charged"
    assert not [i for i in items if i.error and "died" in i.error]
