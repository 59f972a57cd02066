"""workhive-memory: the storage contract (and in-process locks) in process memory.

``workhive.open("memory://")`` gives a private store; ``memory://NAME`` shares
one between Hives of the same process.

>>> from workhive_memory import MemoryStorage
>>> MemoryStorage("memory://shared-in-tests").name
'shared-in-tests'
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workhive_memory.backend import MemoryStorage

__all__ = ["MemoryStorage"]


def __getattr__(name: str) -> Any:
    # Lazy, so that loading the plugin (entry point) stays cheap.
    if name == "MemoryStorage":
        from workhive_memory.backend import MemoryStorage

        return MemoryStorage
    raise AttributeError(f"module 'workhive_memory' has no attribute {name!r}")
