"""Starting bench processes with an import path, and waiting for what their handlers record."""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["env_with_path", "wait_for_lines"]


def env_with_path(path: str | Path, **extra: str) -> dict[str, str]:
    """This process's environment, with ``path`` first on PYTHONPATH and ``extra`` set."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(path), env.get("PYTHONPATH", "")]))
    env.update(extra)
    return env


def wait_for_lines(path: Path, count: int, timeout: float = 30.0, poll: float = 0.0005) -> list[str]:
    """The lines of ``path`` once it has ``count`` of them; TimeoutError after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            lines = path.read_text().splitlines()
            if len(lines) >= count:
                return lines
        time.sleep(poll)
    raise TimeoutError(f"no handler start recorded in {path} after {timeout}s")
