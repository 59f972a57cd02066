"""With a broken plugin installed, the CLI reports it and everything else works.

Runs in the `broken` tox env: core + workhive-memory + workhive-broken-example.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import workhive


def run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # A blocklist inherited from the caller's shell would change what is listed.
    full_env = {k: v for k, v in os.environ.items() if k != "WORKHIVE_DISABLE_PLUGINS"}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "workhive", *args], capture_output=True, text=True, env=full_env, timeout=60
    )


def test_plugins_lists_the_broken_plugin_as_failed_and_memory_as_active() -> None:
    proc = run_cli("plugins", "--json")
    assert proc.returncode == 0, proc.stderr
    plugins = {p["name"]: p for p in json.loads(proc.stdout)}
    assert plugins["broken-example"]["status"] == "failed"
    assert plugins["broken-example"]["distribution"] == "workhive-broken-example"
    assert "workhive_missing_driver_for_tests" in plugins["broken-example"]["error"]
    assert plugins["memory"]["status"] == "active"
    assert plugins["memory"]["distribution"] == "workhive-memory"
    assert plugins["memory"]["version"] == "0.1.0"
    assert "storage" in plugins["memory"]["provides"]
    # The warning names the distribution, on stderr, so --json output stays parseable.
    assert "workhive-broken-example" in proc.stderr


def test_disabled_memory_plugin_is_shown_blocked() -> None:
    proc = run_cli("plugins", "--json", env={"WORKHIVE_DISABLE_PLUGINS": "memory,broken-example"})
    assert proc.returncode == 0, proc.stderr
    plugins = {p["name"]: p for p in json.loads(proc.stdout)}
    assert plugins["memory"]["status"] == "blocked"
    assert plugins["broken-example"]["status"] == "blocked"
    assert proc.stderr == ""


def test_human_output_lists_each_plugin() -> None:
    proc = run_cli("plugins")
    assert proc.returncode == 0, proc.stderr
    assert "memory" in proc.stdout and "failed" in proc.stdout


def test_library_mode_raises_naming_the_distribution() -> None:
    with pytest.raises(workhive.PluginLoadError, match="workhive-broken-example"):
        workhive.PluginManager(disabled=())


@pytest.mark.asyncio
async def test_library_works_once_the_broken_plugin_is_blocked() -> None:
    manager = workhive.PluginManager(disabled=["broken-example"])
    async with workhive.open("memory://", manager=manager) as hive:
        await hive.pool("p").push({"n": 1})
        item = await hive.pool("p").claim(worker_id="w")
        assert item is not None and item.data == {"n": 1}
        await hive.pool("p").complete(item)
