"""``workhive work --metrics-port``: one scrape sums every worker process, and equals what storage says."""

from __future__ import annotations

import asyncio
import signal
import socket
import subprocess
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

import workhive as wh
from workhive.testing.processes import free_port

from .cli_helpers import COMMAND, assert_clean_error, clean_env, workhive

pytest.importorskip("workhive_sqlite")
prometheus_client = pytest.importorskip("prometheus_client")
# Whole fleets summed across processes: once in the Python matrix (the registry and the scrape are
# unit-tested in tests/core/test_metrics.py on every Python).
pytestmark = pytest.mark.one_python
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

DEADLINE = 180.0  # generous: the machine is shared; nothing here measures time

TASKS = textwrap.dedent(
    """
    import workhive

    def flaky(ctx):
        if ctx.data["n"] % 10 == 0 and ctx.attempt == 1:
            raise RuntimeError("first try of every tenth item fails")
        if ctx.data["n"] == 7:
            raise workhive.Permanent("item 7 can never work")
        return {"n": ctx.data["n"]}
    """
)


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def stats(db: Path) -> wh.PoolStats:
    async def go() -> wh.PoolStats:
        async with wh.open(f"sqlite:///{db}") as hive:
            return await hive.pool("jobs").stats()

    return asyncio.run(go())


def test_scraped_counts_equal_storage_after_a_drain(tmp_path: Path) -> None:
    (tmp_path / "metric_tasks.py").write_text(TASKS)
    db = tmp_path / "hive.db"
    items = "".join(f'{{"n": {n}}}\n' for n in range(60))
    pushed = workhive(tmp_path, "--storage", f"sqlite:///{db}", "push", "jobs", "-", stdin=items)
    assert pushed.code == 0, pushed
    port = free_port()
    proc = subprocess.Popen(
        [*COMMAND, "--storage", f"sqlite:///{db}", "work", "jobs", "--handler", "metric_tasks:flaky",
         "--processes", "2", "--concurrency", "2", "--backoff", "none", "--metrics-port", str(port),
         "--progress", "none", "--json"],
        cwd=tmp_path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + DEADLINE
        final = stats(db)
        while time.monotonic() < deadline and final.done + final.poisoned < 60:
            time.sleep(0.1)
            final = stats(db)
        assert (final.done, final.poisoned) == (59, 1), final
        pool = (("pool", "jobs"),)
        got = scrape(port)
        # The gauges are sampled by the supervisor every second or so: wait for a sample of the end state.
        while time.monotonic() < deadline and got.get(("workhive_pool_items", (*pool, ("state", "done")))) != 59:
            time.sleep(0.2)
            got = scrape(port)
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=DEADLINE)
    assert proc.returncode == 0, err[-3000:]
    assert got[("workhive_items_completed_total", pool)] == final.done == 59
    assert got[("workhive_items_poisoned_total", pool)] == final.poisoned == 1
    assert got[("workhive_items_failed_total", pool)] == 6  # items 0, 10, …, 50 failed once and were retried
    assert got[("workhive_items_claimed_total", pool)] == 60 + 6
    assert got[("workhive_handler_seconds_count", pool)] == 60 + 6
    assert got[("workhive_pool_items", (*pool, ("state", "poisoned")))] == 1
    assert got[("workhive_pool_items", (*pool, ("state", "pending")))] == 0
    # No budgets: every ready item is admissible, and none is left ready.
    assert got[("workhive_admissible_items", pool)] == 0


def test_a_metrics_port_in_use_is_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "metric_tasks.py").write_text(TASKS)
    db = tmp_path / "hive.db"
    assert workhive(tmp_path, "--storage", f"sqlite:///{db}", "push", "jobs", "-", stdin='{"n": 1}\n').code == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        run = workhive(
            tmp_path, "--storage", f"sqlite:///{db}", "work", "jobs", "--handler", "metric_tasks:flaky",
            "--metrics-port", str(port), "--until-empty", "--progress", "none",
        )  # fmt: skip
    assert_clean_error(run, f"cannot serve metrics on 127.0.0.1:{port}")
    assert stats(db).pending == 1  # nothing ran
