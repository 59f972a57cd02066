"""The ``memory`` plugin: storage (``memory://``) and in-process locks.

Imports nothing but the descriptors; the implementations load inside the
factories, when a user selects ``memory://``.
"""

from __future__ import annotations

from typing import Any

from workhive import LocksPlugin, StoragePlugin, hookimpl

__all__ = ["workhive_locks", "workhive_storage"]


def _open(url: str, **options: Any) -> Any:
    from workhive_memory.backend import MemoryStorage

    return MemoryStorage(url, **options)


def _open_locks(url: str) -> Any:
    from workhive_memory.locks import MemoryLocks

    return MemoryLocks(url)


@hookimpl
def workhive_storage() -> StoragePlugin:
    return StoragePlugin(
        name="memory",
        factory=_open,
        description="in process memory (tests, notebooks, one process); memory://NAME shares a store",
        schemes=("memory",),
        options=("clock", "create"),
    )


@hookimpl
def workhive_locks() -> LocksPlugin:
    return LocksPlugin(name="memory", factory=_open_locks, description="in-process locks (tests, single process)")
