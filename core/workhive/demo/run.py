"""The demo run: fake API up, keys in the environment, tasks pushed, fleet run, storage checked.

>>> report = run_demo(items=50)  # doctest: +SKIP
>>> report.nothing_lost
True
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs

import workhive
from workhive.demo.fake_api import FakeLLMApi
from workhive.demo.handler import API_URL_ENV
from workhive.demo.tasks import make_texts
from workhive.models import Job
from workhive.plugin_manager import PluginManager

__all__ = ["BUDGET_MODES", "DEMO_DIR", "DEMO_POOL", "KEY_PREFIX", "DemoReport", "run_demo"]

DEMO_DIR = Path(".workhive") / "demo"
DEMO_POOL = "demo-summaries"
KEY_PREFIX = "WORKHIVE_DEMO_KEY"
HANDLER = "workhive.demo.handler:summarise"
REVOKED_KEY = 3  # the demo key the API refuses with 401
#: how the demo fleet keeps to the keys' limits (see run_demo)
BUDGET_MODES = ("known", "learned", "off")


@attrs.frozen
class DemoReport:
    """What the demo did and what storage says afterwards."""

    pushed: int
    done: int  # DONE items counted in storage
    poisoned: int
    unfinished: int  # pending + claimed left in storage: must be 0
    failed: int  # failures retried with backoff
    released: int  # retries without spending an attempt (429s, refused key)
    rate_limited: dict[str, int]  # credential -> 429s the fleet saw
    server: dict[str, dict[str, int]]  # credential -> what the fake API counted
    disabled: dict[str, str]  # credential -> reason
    processes: int
    concurrency: int
    elapsed: float
    fleet_exit_code: int
    fleet_reason: str
    storage: str
    budgets: str = "off"  # off (429s and cooldowns only), known (rpm given), learned (--learn-limits)
    budget_waits: int = 0  # calls that waited for their key's budget instead of meeting a 429

    @property
    def nothing_lost(self) -> bool:
        """Every pushed item is DONE in storage."""
        return self.done == self.pushed and self.unfinished == 0 and self.poisoned == 0

    @property
    def exit_code(self) -> int:
        return 0 if self.nothing_lost and self.fleet_exit_code == 0 else 1

    def to_json(self) -> dict[str, Any]:
        data = attrs.asdict(self)
        data["nothing_lost"] = self.nothing_lost
        data["exit_code"] = self.exit_code
        return data


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """Set variables for the run (worker processes inherit them) and restore the old ones after."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, old in saved.items():
            if old is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = old


async def _push(url: str, manager: PluginManager, texts: list[str]) -> None:
    async with workhive.open(url, manager=manager) as hive:
        await hive.pool(DEMO_POOL).push_many(Job({"doc": i, "text": t}) for i, t in enumerate(texts))


async def _count(url: str, manager: PluginManager) -> workhive.PoolStats:
    async with workhive.open(url, manager=manager) as hive:
        return await hive.pool(DEMO_POOL).stats()


def run_demo(
    *,
    items: int = 300,
    processes: int = 2,
    concurrency: int = 8,
    rate: int = 20,
    directory: Path = DEMO_DIR,
    manager: PluginManager | None = None,
    progress: str = "none",
    on_progress: Callable[[Any], None] | None = None,
    budgets: str = "known",
) -> DemoReport:
    """Run the whole demo in ``directory`` (wiped first, so reruns start clean) and report.

    ``rate`` is each key's allowance per second at the fake API: low enough that
    the fleet meets 429s, high enough to finish quickly. ``budgets``: ``known``
    gives the keys their limit (``env:…?rpm=``), ``learned`` lets the fleet
    learn it (``learn_limits``), ``off`` relies on 429s and cooldowns alone.
    """
    if budgets not in BUDGET_MODES:
        raise ValueError(f"budgets must be one of {', '.join(BUDGET_MODES)}, got {budgets!r}")
    from workhive.runtime import FleetOptions, run_fleet

    manager = manager if manager is not None else workhive.plugin_manager.default_manager()
    shutil.rmtree(directory, ignore_errors=True)
    directory.mkdir(parents=True, exist_ok=True)
    storage = f"sqlite:///{directory / 'hive.db'}"
    locks = f"fcntl:///{directory / 'locks'}"

    names = [f"{KEY_PREFIX}_{i}" for i in (1, 2, 3)]
    keys = {name: f"sk-demo-{secrets.token_hex(12)}" for name in names}
    revoked_name = names[REVOKED_KEY - 1]
    good = {secret: name for name, secret in keys.items() if name != revoked_name}
    spec = f"env:{KEY_PREFIX}" + (f"?rpm={rate * 60}" if budgets == "known" else "")
    started = time.monotonic()
    with FakeLLMApi(good, revoked={keys[revoked_name]: revoked_name}, rate=rate) as api:
        with _environment({**keys, API_URL_ENV: api.url}):
            asyncio.run(_push(storage, manager, make_texts(items)))
            fleet = run_fleet(
                FleetOptions(
                    pool=DEMO_POOL,
                    handler=HANDLER,
                    storage=storage,
                    locks=locks,
                    credentials=(spec,),  # type: ignore[arg-type]  # attrs converter=tuple
                    processes=processes,
                    concurrency=concurrency,
                    until_empty=True,
                    lease=30.0,
                    heartbeat=5.0,
                    reap_after=15.0,
                    grace=10.0,
                    progress=progress,  # type: ignore[arg-type]
                    learn_limits=budgets == "learned",
                ),
                on_progress=on_progress,
            )
        server = api.stats_json()
    stats = asyncio.run(_count(storage, manager))
    return DemoReport(
        pushed=items,
        done=stats.done,
        poisoned=stats.poisoned,
        unfinished=stats.pending + stats.delayed + stats.claimed,
        failed=fleet.failed,
        released=fleet.released,
        rate_limited=dict(fleet.rate_limited),
        server=server,
        disabled=dict(fleet.disabled_credentials),
        processes=processes,
        concurrency=concurrency,
        elapsed=time.monotonic() - started,
        fleet_exit_code=fleet.exit_code,
        fleet_reason=fleet.reason,
        storage=storage,
        budgets=budgets,
        budget_waits=getattr(fleet, "budget_waits", 0),
    )
