"""A fleet (``workhive work``, two processes) stops serving a tenant whose token budget is spent.

Observed through the hive, never by timing: the other tenant's items all finish
while the spent tenant's remaining items wait, pending and unfailed, its group
paused until its budget refills (a day away at the rate the test sets).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

import workhive
from workhive.group_budgets import group_budgets
from workhive.models import ItemState
from workhive.storage import ServesGroups
from workhive.testing.environment import workhive_free_env
from workhive.testing.services import isolated_store

from .cli_helpers import COMMAND
from .cli_helpers import workhive as run_workhive

pytest.importorskip("workhive_sqlite")
pytestmark = pytest.mark.one_python  # a whole fleet: once in the Python matrix

HERE = Path(__file__).parent
PATIENCE = 240.0
SPENT, OTHER = 10, 20  # items of the tenant that runs out, and of the one that does not


async def _setup(url: str) -> None:
    async with workhive.open(url) as hive:
        if not isinstance(hive.storage, ServesGroups):
            pytest.skip(f"{type(hive.storage).__name__} serves no groups on this checkout yet")
        pool = hive.pool("agents")
        # 400 tokens an item against 1,000 a day: the third item spends the budget.
        await pool.push_many([{"tokens": 400} for _ in range(SPENT)], group="spender")
        await pool.push_many([{"tokens": 1} for _ in range(OTHER)], group="thrifty")


async def _read(url: str) -> tuple[dict[str | None, int], dict[str | None, int], float | None, float, float]:
    """(done per group, pending per group, the spender's pause end, the hive's now, the spender's spend)."""
    async with workhive.open(url, create=False) as hive:
        pool = hive.pool("agents")
        done: dict[str | None, int] = {}
        pending: dict[str | None, int] = {}
        for state, into in ((ItemState.DONE, done), (ItemState.PENDING, pending)):
            for item in await pool.items(state, limit=1000):
                into[item.group] = into.get(item.group, 0) + 1
        spender = (await pool.groups()).group("spender")
        spent = (await group_budgets(hive, "agents"))["spender"].spent
        return done, pending, spender.paused_until if spender else None, await hive.now(), spent


@pytest.fixture(params=["sqlite", "postgres", "redis"])
def url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    with isolated_store(request.param, tmp_path) as found:
        yield found


def test_a_spent_tenant_waits_while_the_others_finish(tmp_path: Path, url: str) -> None:
    asyncio.run(_setup(url))
    budget = run_workhive(tmp_path, "--storage", url, "group", "budget", "agents", "spender", "--tpd", "1000")
    assert budget.code == 0, budget.err
    env = workhive_free_env()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    command = [*COMMAND, "--storage", url, "work", "agents", "--handler", "group_budget_handlers:uses_tokens"]
    command += ["--processes", "2", "--progress", "none"]
    fleet = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + PATIENCE
        done: dict[str | None, int] = {}
        while time.monotonic() < deadline and done.get("thrifty", 0) < OTHER:
            assert fleet.poll() is None, fleet.stderr.read() if fleet.stderr else ""
            done, *_ = asyncio.run(_read(url))
            time.sleep(0.2)
    finally:
        fleet.send_signal(signal.SIGTERM)
        fleet.wait(PATIENCE)
    done, pending, paused_until, now, spent = asyncio.run(_read(url))
    assert done.get("thrifty") == OTHER, "the other tenant went on"
    # Items already running when the budget ran out finished; the rest wait, pending, none failed.
    assert 3 <= done.get("spender", 0) < SPENT and done["spender"] + pending.get("spender", 0) == SPENT
    assert spent == pytest.approx(400 * done["spender"], rel=1e-3)
    assert paused_until is not None and paused_until > now, "paused until its budget refills"
    assert fleet.returncode == 0, fleet.stderr.read() if fleet.stderr else ""
