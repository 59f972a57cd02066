"""Handlers for the autoscaling fleet tests (imported by spec, ``autoscale_handlers:NAME``)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def hold(ctx: Any) -> str:
    """Work until the test lets go: the file named by AUTOSCALE_RELEASE exists (a latch across processes)."""
    release = Path(os.environ["AUTOSCALE_RELEASE"])
    while not release.exists():
        time.sleep(0.02)  # the handler's own wait for the latch; no test asserts on it
    return "held"


def quick(ctx: Any) -> str:
    """Return at once: the keys' budgets, not the handler, set the pace."""
    return ctx.credential.name if ctx.credential is not None else "-"
