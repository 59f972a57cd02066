"""Prometheus metrics: event hooks count what storage did, sampled gauges equal storage's counts."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import workhive
from workhive.errors import ConfigError
from workhive.plugin_manager import PluginManager

prometheus_client = pytest.importorskip("prometheus_client")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from workhive import metrics  # noqa: E402


def scrape(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


@pytest.mark.asyncio
async def test_counters_and_sampled_gauges_match_storage() -> None:
    memory = pytest.importorskip("workhive_memory", reason="needs workhive-memory (the all-* envs have it)")
    manager = PluginManager(entry_points=False, extra=[("metrics", metrics.MetricsPlugin())])
    async with workhive.Hive(memory.MemoryStorage(), manager=manager, max_attempts=1) as hive:
        pool = hive.pool("metrics-a")
        await pool.push_many(list(range(6)))
        for _ in range(3):
            item = await pool.claim("w1")
            assert item is not None
            await pool.complete(item, None)
        item = await pool.claim("w1")
        assert item is not None
        await pool.fail(item, "boom")  # max_attempts=1: poisoned
        await hive.workers.register(worker_id="w1", pools=["metrics-a"])
        await metrics.sample(hive)
        stats = await pool.stats()
    got = scrape(prometheus_client.generate_latest().decode())
    label = (("pool", "metrics-a"),)
    assert got[("workhive_items_claimed_total", label)] == 4
    assert got[("workhive_items_completed_total", label)] == stats.done == 3
    assert got[("workhive_items_poisoned_total", label)] == stats.poisoned == 1
    assert got[("workhive_claims_in_flight", label)] == stats.claimed == 0
    assert got[("workhive_pool_items", (("pool", "metrics-a"), ("state", "pending")))] == stats.pending == 2
    assert got[("workhive_workers", (("health", "active"),))] == 1
    assert got[("workhive_queue_wait_seconds_count", label)] == 4


def test_credential_metrics_carry_the_name_never_the_key() -> None:
    metrics.observe_credential("OPENAI_KEY_1", "rate_limited", "cooling", None)
    text = prometheus_client.generate_latest().decode()
    got = scrape(text)
    assert got[("workhive_credential_calls_total", (("credential", "OPENAI_KEY_1"), ("outcome", "rate_limited")))] == 1
    assert got[("workhive_credential_state", (("credential", "OPENAI_KEY_1"), ("state", "cooling")))] == 1
    assert got[("workhive_credential_state", (("credential", "OPENAI_KEY_1"), ("state", "available")))] == 0


_CHILD = """
import sys
from workhive import metrics
for _ in range(int(sys.argv[1])):
    metrics.MetricsPlugin().workhive_item_completed(pool="mp", item=None)
"""


def test_counts_from_many_processes_are_summed_on_one_port(tmp_path: Path) -> None:
    directory = tmp_path / "metrics"
    env_script = textwrap.dedent(
        f"""
        import os, sys, time, urllib.request
        from workhive import metrics
        metrics.enable({str(directory)!r})
        import subprocess
        for n in (3, 4):
            subprocess.run([sys.executable, "-c", {_CHILD!r}, str(n)], check=True)
        server = metrics.serve(0)
        port = server.server_address[1]
        print(urllib.request.urlopen(f"http://127.0.0.1:{{port}}/metrics", timeout=30).read().decode())
        """
    )
    out = subprocess.run([sys.executable, "-c", env_script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = scrape(out.stdout)
    assert got[("workhive_items_completed_total", (("pool", "mp"),))] == 7


def test_a_port_in_use_is_a_clear_error() -> None:
    server = metrics.serve(0)
    try:
        with pytest.raises(ConfigError, match="pick another --metrics-port"):
            metrics.serve(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
