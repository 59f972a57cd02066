"""workhive storage on SQLite: ``sqlite:///.workhive/hive.db``, the embedded default.

>>> import workhive  # doctest: +SKIP
>>> hive = workhive.open("sqlite:///.workhive/hive.db?synchronous=full")

``SqliteStorage`` is importable from here for direct construction (tests,
injected clocks). It is loaded on first access so that importing the plugin
module (which imports this package) stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workhive_sqlite.backend import SqliteStorage
    from workhive_sqlite.url import SqliteConfig, parse_url

__all__ = ["SqliteConfig", "SqliteStorage", "parse_url"]


def __getattr__(name: str) -> Any:
    if name == "SqliteStorage":
        from workhive_sqlite.backend import SqliteStorage

        return SqliteStorage
    if name in ("SqliteConfig", "parse_url"):
        from workhive_sqlite import url

        return getattr(url, name)
    raise AttributeError(f"module 'workhive_sqlite' has no attribute {name!r}")
