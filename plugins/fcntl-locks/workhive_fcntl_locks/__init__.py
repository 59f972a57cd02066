"""workhive-fcntl-locks: named locks on one machine with ``flock(2)``, the default lock provider.

>>> import workhive  # doctest: +SKIP
>>> hive = workhive.open("sqlite:///.workhive/hive.db", locks="fcntl:///.workhive/locks")

``FcntlLocks`` is imported on first use so that loading the plugin stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workhive_fcntl_locks.provider import FcntlLocks
    from workhive_fcntl_locks.url import DEFAULT_DIRECTORY, directory_from_url

__all__ = ["DEFAULT_DIRECTORY", "FcntlLocks", "directory_from_url"]


def __getattr__(name: str) -> Any:
    if name == "FcntlLocks":
        from workhive_fcntl_locks.provider import FcntlLocks

        return FcntlLocks
    if name in ("DEFAULT_DIRECTORY", "directory_from_url"):
        from workhive_fcntl_locks import url

        return getattr(url, name)
    raise AttributeError(f"module 'workhive_fcntl_locks' has no attribute {name!r}")
