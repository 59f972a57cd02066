"""The seam between the supervisor (parent) and a worker process (child).

The parent side (``fleet``, ``supervisor``) takes what it shares with the
child from ``workhive.runtime.shared``, never from the child's modules.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

import workhive
from workhive.plugin_manager import PluginManager, find_plugins
from workhive.runtime.shared import PLUGINS_FOUND_ENV, found_from_env, found_to_env

from .conftest import fleet_script, report_of

CHILD_MODULES = ("workhive.runtime.process", "workhive.runtime.worker")
#: what a worker process does not need before its first claim: the parent side, the CLI, the
#: display, metrics, and the installed-metadata reader (its supervisor hands it the plugins found)
NOT_ON_THE_WORKER_PATH = (
    "workhive.runtime.supervisor",
    "workhive.runtime.fleet",
    "workhive.runtime.progress",
    "workhive.cli",
    "workhive.metrics",
    "workhive.config",
    "importlib.metadata",
    "email.utils",
    "zoneinfo",
)


def test_the_parent_side_imports_no_module_of_the_child() -> None:
    # A fresh interpreter: this test process has imported every runtime module already.
    probe = (
        "import sys, workhive.runtime.fleet, workhive.runtime.supervisor, workhive.cli.work_cmd; "
        f"print(','.join(m for m in {CHILD_MODULES!r} if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", f"the parent side imported {done.stdout.strip()}"


def test_what_parent_and_child_share_lives_in_one_module() -> None:
    from workhive.runtime import process, shared, supervisor

    # The child and the parent use the very same objects, defined in ``shared``.
    for name in ("EXIT_UNHEALTHY", "PATH_AFTER_ENV", "PLUGINS_FOUND_ENV", "metrics_enabled"):
        assert getattr(supervisor, name) is getattr(shared, name)
        assert getattr(process, name) is getattr(shared, name)
    assert process.options_from_json is shared.options_from_json
    assert supervisor.options_to_json is shared.options_to_json


def _fresh(probe: str, env: dict[str, str] | None = None) -> str:
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_worker_process_imports_nothing_it_needs_only_later_or_never() -> None:
    probe = (
        "import sys, workhive.runtime.process; "
        f"print(','.join(m for m in {NOT_ON_THE_WORKER_PATH!r} if m in sys.modules))"
    )
    assert _fresh(probe) == ""


def test_plugins_handed_over_load_the_same_plugins_without_reading_the_metadata() -> None:
    found = find_plugins()
    assert found[1], "no plugin installed: nothing to hand over"
    assert found_from_env(found_to_env(found)) == found
    env = dict(os.environ, **{PLUGINS_FOUND_ENV: found_to_env(found)})
    probe = (
        "import os, sys, json; from workhive.plugin_manager import PluginManager; "
        "from workhive.runtime.shared import found_from_env; "
        f"m = PluginManager(found=found_from_env(os.environ[{PLUGINS_FOUND_ENV!r}])); "
        "print(json.dumps([[p.name, p.status, p.version] for p in m.plugins()] + "
        "[m.names('storage'), 'importlib.metadata' in sys.modules]))"
    )
    *plugins, storage, metadata_read = json.loads(_fresh(probe, env))
    here = PluginManager()
    assert plugins == [[p.name, p.status, p.version] for p in here.plugins()]
    assert storage == here.names("storage")
    assert metadata_read is False


@pytest.mark.parametrize("text", ["", "not json", "[1]", '["1.0", [["only-a-name"]]]'])
def test_a_malformed_hand_over_means_read_the_metadata(text: str) -> None:
    assert found_from_env(text) is None


def test_the_supervisor_hands_its_plugins_to_the_worker_processes(tmp_path, run_script) -> None:
    pytest.importorskip("workhive_sqlite")
    db = tmp_path / "hive.db"
    url = f"sqlite:///{db}"

    async def push() -> list[str]:
        async with workhive.open(url) as hive:
            return await hive.pool("jobs").push_many([{"n": i} for i in range(4)])

    ids = asyncio.run(push())
    options = dict(
        pool="jobs",
        storage=url,
        locks=f"fcntl:///{tmp_path / 'locks'}",
        handler="handlers:modules_seen",
        processes=2,
        until_empty=True,
        progress="none",
    )
    proc = run_script(fleet_script(**options))
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert report_of(out)["done"] == 4

    async def results() -> list[object]:
        async with workhive.open(url) as hive:
            return [(await hive.pool("jobs").get(i)).result for i in ids]

    # The worker processes loaded the sqlite plugin from what the supervisor found (and popped the
    # variable: a handler's subprocesses are not worker processes), without reading any metadata.
    assert asyncio.run(results()) == [{"imported": [], "plugins_env": False}] * 4
