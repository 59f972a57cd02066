"""The ``sqlite`` storage plugin: registered under the ``workhive`` entry-point group.

This module imports nothing heavy; the backend (and aiosqlite) load when a
``sqlite://`` URL is opened.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from workhive.hookspecs import hookimpl
from workhive.plugin_types import StoragePlugin

if TYPE_CHECKING:
    from workhive_sqlite.backend import SqliteStorage

__all__ = ["workhive_storage"]


def _open(url: str, **options: Any) -> SqliteStorage:
    from workhive_sqlite.backend import SqliteStorage

    return SqliteStorage(url, **options)


@hookimpl
def workhive_storage() -> StoragePlugin:
    return StoragePlugin(
        name="sqlite",
        factory=_open,
        description="SQLite file (WAL), safe across worker processes on one machine; the default",
        # ignore: mypy cannot see through attrs' `converter=tuple` in the core descriptor.
        schemes=("sqlite",),  # type: ignore[arg-type]
        options=("clock", "create"),
    )
