"""Shared helpers for the runtime's integration tests (every plugin installed)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent


@pytest.fixture
def handlers_on_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """This directory on ``sys.path``, so in-process runs can import ``handlers:...``."""
    monkeypatch.syspath_prepend(str(HERE))


def bookkeeping_child(**fields: Any) -> Any:
    """The supervisor's record of one worker process (``supervisor._Child``), without a real process.

    Built through its constructor, so every piece of bookkeeping starts as the class says
    (a new field needs no test to know of it); ``fields`` sets others (``board=``, …).
    """
    from types import SimpleNamespace

    from workhive.runtime.supervisor import _Child

    return _Child(proc=SimpleNamespace(pid=0), fd=-1, started_at=0.0, ready=True, **fields)


def fleet_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


@pytest.fixture
def run_script(tmp_path):
    """Run a Python snippet in a fresh interpreter (as a user's script would) and return the process."""

    def start(code: str, *, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        script = tmp_path / f"script_{len(list(tmp_path.glob('script_*.py')))}.py"
        script.write_text(textwrap.dedent(code))
        return subprocess.Popen(
            [sys.executable, str(script)],
            env=env or fleet_env(),
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    return start


def report_of(stdout: str) -> dict[str, Any]:
    """The ``REPORT {...}`` line a fleet script prints."""
    for line in stdout.splitlines():
        if line.startswith("REPORT "):
            return json.loads(line[len("REPORT ") :])  # type: ignore[no-any-return]
    raise AssertionError(f"no report in output: {stdout!r}")


FLEET_SCRIPT = """
import json, sys, attrs
from workhive.runtime import FleetOptions, run_fleet
if __name__ == "__main__":
    options = FleetOptions(**json.loads(sys.argv[1]) if len(sys.argv) > 1 else {OPTIONS})
    report = run_fleet(options)
    print("REPORT " + json.dumps(attrs.asdict(report)), flush=True)
    sys.exit(report.exit_code)
"""


def fleet_script(**options: Any) -> str:
    return FLEET_SCRIPT.replace("{OPTIONS}", repr(options))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``one_python`` tests where tox says another Python of the matrix runs them (all-py311)."""
    if os.environ.get("WORKHIVE_ONE_PYTHON_ELSEWHERE") != "1":
        return
    skip = pytest.mark.skip(reason="a whole-fleet test that runs once in the matrix, in all-py311")
    for item in items:
        if item.get_closest_marker("one_python") is not None:
            item.add_marker(skip)
