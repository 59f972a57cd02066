"""The ``fcntl-locks`` plugin: registers the ``fcntl`` lock provider (imports nothing heavy)."""

from __future__ import annotations

from typing import Any

from workhive.hookspecs import hookimpl
from workhive.plugin_types import LocksPlugin


def _open(url: str) -> Any:
    from workhive_fcntl_locks.provider import FcntlLocks

    return FcntlLocks(url)


@hookimpl
def workhive_locks() -> LocksPlugin:
    return LocksPlugin(
        name="fcntl",
        factory=_open,
        description="flock(2) on one file per name in a directory (one machine); fcntl:///.workhive/locks",
    )
