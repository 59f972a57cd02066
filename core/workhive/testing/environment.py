"""A test's own environment: none of the caller's ``WORKHIVE_*`` settings, its own directory.

The CLI reads ``WORKHIVE_*`` variables and a ``workhive.toml`` found from the
working directory, so a test of it that inherits either tests the caller's
set-up instead of its own. Two helpers, one for the test process and one for
the processes it starts::

    from workhive.testing.environment import without_workhive_settings, workhive_free_env

    @pytest.fixture(autouse=True)
    def clean_env(tmp_path, monkeypatch):
        return without_workhive_settings(monkeypatch, tmp_path)

    subprocess.run(["workhive", "status"], env=workhive_free_env(WORKHIVE_STORAGE=url))
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any


def without_workhive_settings(monkeypatch: Any, directory: Path, keep: Iterable[str] = ()) -> Path:
    """Unset every ``WORKHIVE_*`` variable but those in ``keep`` and ``chdir`` into ``directory``.

    ``monkeypatch`` is pytest's fixture: both are undone after the test.
    Returns ``directory``.
    """
    kept = set(keep)
    for name in list(os.environ):
        if name.startswith("WORKHIVE_") and name not in kept:
            monkeypatch.delenv(name)
    monkeypatch.chdir(directory)
    return directory


def workhive_free_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``WORKHIVE_*`` variables, plus ``extra``: for a child process."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKHIVE_")}
    env.update(extra)
    return env
