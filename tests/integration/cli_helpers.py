"""Running ``workhive`` as a user would: a subprocess in a fresh directory, without the caller's settings."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs

from workhive.testing.environment import workhive_free_env

_SCRIPT = Path(sys.executable).parent / "workhive"
COMMAND = [str(_SCRIPT)] if _SCRIPT.exists() else [sys.executable, "-m", "workhive"]


@attrs.frozen
class Run:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


clean_env = workhive_free_env


def workhive(cwd: Path, *args: str, stdin: str | None = None, timeout: float = 120, **env: str) -> Run:
    """Run ``workhive ARGS`` in ``cwd``; bounded in time."""
    proc = subprocess.run(
        [*COMMAND, *args],
        cwd=cwd,
        input=stdin,
        capture_output=True,
        text=True,
        env=clean_env(**env),
        timeout=timeout,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr)


def assert_clean_error(run: Run, *fragments: str) -> None:
    """Non-zero exit, a one-line ``error:`` message containing ``fragments``, no traceback."""
    assert run.code != 0, run
    assert "Traceback" not in run.err, run.err
    errors = [line for line in run.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, run.err
    for fragment in fragments:
        assert fragment in errors[0], run.err
