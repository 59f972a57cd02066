"""Repository-wide test hygiene: a test run leaves nothing behind in the checkout.

Every test writes under a temporary directory (``tmp_path``). Pytest loads
this file for every test root of the repository (tests/, plugins/*/tests), and
it checks the promise: it lists the checkout's untracked and ignored files
(``git status``) when the session starts and when it ends, and fails the run
naming every file that appeared. Files that tools write are not counted
(bytecode, egg-info and build/ from editable installs, virtualenvs, tox and the
caches of pytest, mypy and ruff), so parallel tox envs sharing the checkout do
not trip it; files deleted, or tracked files edited meanwhile, are not counted
either. git does not see empty directories, so new empty ones are caught at the
top level of the checkout only. Hypothesis keeps its example database and constants cache in a
temporary directory for the same reason.

The check costs two ``git status`` calls per run; without git or outside a git
checkout (an unpacked sdist) it does nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent

#: what tools (not tests) write into a checkout, as git pathspecs to leave out
TOOL_OUTPUT = (
    ".git",
    ".venv",
    ".tox",
    ".pytest_cache",
    ".mypy_cache",
    ".ruff_cache",
    # Hypothesis's example cache: this file sends it to a temporary directory, but a helper
    # process started from the checkout can still write its own (it is a cache, and ignored).
    ".hypothesis",
    "dist",
    "**/__pycache__/**",
    "**/*.egg-info/**",
    "**/build/**",
)

_BEFORE = pytest.StashKey[frozenset[str]]()


def files_outside_git(root: Path = ROOT) -> frozenset[str] | None:
    """The checkout's untracked and ignored files (tool output left out), or None without git."""
    excludes = ["--", ".", *(f":(exclude,glob){pattern}" for pattern in TOOL_OUTPUT)]
    try:
        proc = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--ignored", "--untracked-files=all", "-z", *excludes],
            capture_output=True,
            timeout=120,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if proc.returncode != 0:  # not a git checkout
        return None
    entries = proc.stdout.split(b"\0")
    files = {e[3:].decode("utf-8", "surrogateescape") for e in entries if e[:3] in (b"?? ", b"!! ")}
    # git does not list empty directories: look at the top level ourselves.
    files.update(f"{name}/" for name in os.listdir(root) if name not in TOOL_OUTPUT and (root / name).is_dir())
    return frozenset(files)


def _keep_hypothesis_out_of_the_checkout() -> str | None:
    # At import, before any test root's conftest loads a Hypothesis profile.
    try:
        from hypothesis.configuration import set_hypothesis_home_dir
    except ImportError:  # a core-only environment without the testing extra
        return None
    home = tempfile.mkdtemp(prefix="workhive-hypothesis-")
    set_hypothesis_home_dir(home)
    return home


_HYPOTHESIS_HOME = _keep_hypothesis_out_of_the_checkout()


def pytest_configure(config: pytest.Config) -> None:
    before = files_outside_git()
    if before is not None:
        config.stash[_BEFORE] = before


def pytest_unconfigure(config: pytest.Config) -> None:
    if _HYPOTHESIS_HOME is not None:
        shutil.rmtree(_HYPOTHESIS_HOME, ignore_errors=True)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_BEFORE, None)
    after = files_outside_git() if before is not None else None
    if before is None or after is None:
        return
    left = sorted(after - before)
    if not left:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None:
        reporter.write("\n")
        reporter.write_sep("=", f"{len(left)} file(s) left in the checkout {ROOT}", red=True)
        for path in left[:50]:
            reporter.write_line(f"  {path}")
        if len(left) > 50:
            reporter.write_line(f"  ... and {len(left) - 50} more")
        reporter.write_line(
            "Tests must write under a temporary directory (tmp_path, or monkeypatch.chdir(tmp_path) for code "
            "that writes relative to the working directory). Delete these files; run a test file alone to "
            "find the one that writes them."
        )
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
