"""Every way a handler can end its worker process charges the item that did it, and only that item.

``workhive work`` runs as a user would (a subprocess, a fresh directory) on a SQLite hive whose
items include one that ends its process: by ``SystemExit`` (in the thread pool, on the event loop,
through the key-holding path), ``KeyboardInterrupt``, ``os._exit(3)``, a segfault, or SIGKILL. The
item is poisoned after ``--max-attempts``, its error says how the process ended, every other item
is done with a single attempt, ``--until-empty`` ends, and the key the handler quoted on its way
out is nowhere: not in the output, not in the error output, not in the database.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

import workhive as workhive_api
from workhive.models import ItemState, WorkItem

from .cli_helpers import workhive
from .conftest import HERE

pytest.importorskip("workhive_sqlite")

CANARY = "sk-canary-3333-LEAKED-cccccccccccccccc"
MAX_ATTEMPTS = 3
ITEMS = 8
BAD = 3  # the index of the item that ends its process

CASES = {
    # name: (handler, WORKHIVE_TEST_HOW, with a key (the handler runs through the key-holding path), error says)
    "system_exit_in_the_thread_pool": ("ends_its_process", "system_exit", False, "exited with SystemExit: fatal: key"),
    "system_exit_holding_a_key": ("ends_its_process", "system_exit", True, "exited with SystemExit: fatal: key ***"),
    "system_exit_on_the_event_loop": (
        "ends_its_process_async",
        "system_exit",
        True,
        "exited with SystemExit: fatal: key ***",
    ),
    "keyboard_interrupt": ("ends_its_process", "keyboard_interrupt", True, "exited with KeyboardInterrupt"),
    "os_exit": ("ends_its_process", "os_exit", False, "died while running this item alone: exit status 3"),
    "segfault": ("ends_its_process", "sigsegv", False, "killed by signal 11 (SIGSEGV)"),
    "sigkill": ("ends_its_process", "sigkill", False, "killed by signal 9 (SIGKILL)"),
}


def _assert_clean(where: str, data: str | bytes) -> None:
    raw = data.encode() if isinstance(data, str) else data
    assert CANARY.encode() not in raw and b"LEAKED" not in raw, f"the key leaked in {where}"


@pytest.mark.parametrize("case", list(CASES))
def test_the_item_that_ends_its_process_is_poisoned_and_no_other_is_charged(tmp_path: Path, case: str) -> None:
    handler, how, with_key, says = CASES[case]
    env = {"PYTHONPATH": str(HERE), "CANARY": CANARY, "WORKHIVE_TEST_HOW": how}
    storage = "sqlite:///hive.db"
    items = "".join(json.dumps({"n": n, "bad": n == BAD}) + "\n" for n in range(ITEMS))
    pushed = workhive(tmp_path, "--storage", storage, "push", "jobs", "-", stdin=items, **env)
    assert pushed.code == 0, pushed
    key = ["--credentials", "env:CANARY"] if with_key else []
    run = workhive(
        tmp_path,
        "--storage", storage, "work", "jobs", "--handler", f"crash_handlers:{handler}", *key,
        "--processes", "1", "--concurrency", "2", "--max-attempts", str(MAX_ATTEMPTS),
        "--until-empty", "--progress", "none", "--json",
        timeout=240,
        **env,
    )  # fmt: skip
    assert run.code == 0, run
    report = run.json()
    assert report["reason"] == "the pool drained", report
    assert report["poisoned"] == 1 and report["done"] == ITEMS - 1, report
    _assert_clean("work's output", run.out)
    _assert_clean("work's error output (supervisor and worker processes)", run.err)

    items = _items(tmp_path / "hive.db")
    assert len(items) == ITEMS
    bad = next(i for i in items if i.data["bad"])
    assert bad.state is ItemState.POISONED and bad.attempts == MAX_ATTEMPTS, bad
    assert says in bad.error, bad.error
    innocents = [i for i in items if i is not bad]
    assert all(i.state is ItemState.DONE and i.attempts == 1 for i in innocents), innocents
    dead = workhive(tmp_path, "--storage", storage, "dead", "jobs", "--json", **env)
    assert dead.code == 0 and [i["id"] for i in dead.json()] == [bad.id], dead
    _assert_clean("dead --json", dead.out)
    for path in tmp_path.glob("hive.db*"):
        _assert_clean(str(path), path.read_bytes())


def _items(db: Path, limit: int = 100) -> list[WorkItem]:
    async def read() -> list[WorkItem]:
        async with workhive_api.open(f"sqlite:///{db}", create=False) as hive:
            pool = hive.pool("jobs")
            return [i for state in ItemState for i in await pool.items(state, limit=limit)]

    return asyncio.run(read())


@pytest.mark.parametrize("start_method", ["spawn", "fork"])
@pytest.mark.parametrize("handler", ["ends_its_process", "ends_its_process_async"])
def test_the_item_that_ends_its_process_inside_a_long_batch_is_the_one_charged(
    tmp_path: Path, handler: str, start_method: str
) -> None:
    """Fast items run in batches of up to hundreds a lane, each written to the lane board, not announced one by one.

    The board reaches a spawned worker process as a descriptor, and a forked one inherits it.

    The process dies at an item deep inside such a batch (SIGKILL: nothing of its own is
    written on the way out). The supervisor reads from the board which item that was: it
    alone spends its attempts and is poisoned; every other item is done, with one attempt.
    """
    count, bad = 600, 450
    env = {"PYTHONPATH": str(HERE), "WORKHIVE_TEST_HOW": "sigkill"}
    storage = "sqlite:///hive.db"
    items = "".join(json.dumps({"n": n, "bad": n == bad}) + "\n" for n in range(count))
    assert workhive(tmp_path, "--storage", storage, "push", "jobs", "-", stdin=items, **env).code == 0
    run = workhive(
        tmp_path,
        "--storage", storage, "work", "jobs", "--handler", f"crash_handlers:{handler}",
        "--processes", "1", "--concurrency", "2", "--max-attempts", str(MAX_ATTEMPTS),
        "--start-method", start_method, "--until-empty", "--progress", "none", "--json",
        timeout=240,
        **env,
    )  # fmt: skip
    assert run.code == 0, run
    report = run.json()
    assert report["poisoned"] == 1 and report["done"] == count - 1, report
    # Every death named it: charged at once, or (the first, beside another lane's claim) marked a
    # suspect to run alone. A death the board did not explain would blame nothing, and it would
    # kill process after process until some other way caught it.
    assert report["processes_replaced"] <= MAX_ATTEMPTS + 1, (report, run.err[-3000:])
    found = _items(tmp_path / "hive.db", limit=count)
    dead = next(i for i in found if i.data["bad"])
    assert dead.state is ItemState.POISONED and dead.attempts == MAX_ATTEMPTS, dead
    assert "killed by signal 9" in dead.error, dead.error
    innocents = [i for i in found if i is not dead]
    assert len(innocents) == count - 1
    assert all(i.state is ItemState.DONE and i.attempts == 1 for i in innocents), [
        i for i in innocents if i.state is not ItemState.DONE or i.attempts != 1
    ][:5]
