"""Compile the checkout's packages to ``.pyc`` once before a bench spawns worker processes.

An installed workhive (a wheel) has its ``.pyc`` written by pip at install; this
checkout is installed editable, and where ``PYTHONDONTWRITEBYTECODE`` is set (as on
the shared bench machine) every worker process would compile workhive from
source (0.1-0.15 s of CPU each), a start-up cost a user never pays. The peers
the benches compare against are installed by pip and already have theirs.
``compileall`` writes the files whatever that variable says, and Python reads
them under it. Nothing is hidden: the benches still print start-up seconds.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

__all__ = ["NOTE", "compile_checkout"]

ROOT = Path(__file__).resolve().parents[2]
#: What the bench's output says about it.
NOTE = "workhive's core/ and plugins/ compiled to .pyc first, as an installed wheel is"

_done = False


def compile_checkout() -> str:
    """``python -m compileall -q core plugins`` in the checkout, once per bench process; returns ``NOTE``."""
    global _done
    if not _done:
        subprocess.run(
            [sys.executable, "-m", "compileall", "-q", str(ROOT / "core"), str(ROOT / "plugins")],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        _done = True
    return NOTE
