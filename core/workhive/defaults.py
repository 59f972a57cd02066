"""What a hive uses when nothing is configured, and the one rule for its default lock provider.

A storage engine whose plugin also provides locks keeps its locks where it
keeps its items: when an installed locks plugin claims the storage URL's scheme
(``postgresql``/``postgres``, ``redis``/``rediss``/``unix``, ``memory``), the
default lock provider is that plugin, given the storage URL itself, so the
locks live in the same server and the same namespace (PostgreSQL ``?schema=``,
Redis ``?prefix=``, a ``memory://NAME`` store) and every machine of the fleet
shares them. Any other storage (the embedded SQLite default, a plugin without
locks) defaults to ``fcntl:///.workhive/locks``: flock(2), one machine.

The storage URL is handed over unchanged, options and all: a plugin that
provides storage and locks for one scheme reads both with one URL parser, so
its locks factory accepts every storage URL of that scheme (the engines' tests
check this for each option).

``Hive.locks()`` and the ``locks`` setting of ``workhive.config`` both ask
``default_locks_url``; nothing else decides it.

>>> from workhive.plugin_manager import PluginManager
>>> default_locks_url("sqlite:///.workhive/hive.db", PluginManager(entry_points=False))
'fcntl:///.workhive/locks'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from workhive.errors import ConfigError, PluginNotFound
from workhive.urls import scheme_of

if TYPE_CHECKING:
    from workhive.plugin_manager import PluginManager

__all__ = ["DEFAULT_BACKOFF", "DEFAULT_LOCKS", "DEFAULT_STORAGE", "START_METHODS", "default_locks_url"]

DEFAULT_STORAGE = "sqlite:///.workhive/hive.db"
DEFAULT_LOCKS = "fcntl:///.workhive/locks"
DEFAULT_BACKOFF = "full-jitter"
#: how ``workhive work`` may start its worker processes (``FleetOptions.start_method``, workhive.runtime.forked)
START_METHODS = ("auto", "fork", "spawn")


def default_locks_url(storage_url: object, manager: PluginManager) -> str:
    """The lock provider URL for a hive on ``storage_url`` when no ``locks`` URL is given.

    ``storage_url`` itself when a locks plugin in ``manager`` claims its scheme,
    else ``DEFAULT_LOCKS``. ``storage_url=None`` (a backend built by hand) also
    gets ``DEFAULT_LOCKS``.

    >>> from workhive.plugin_manager import PluginManager
    >>> default_locks_url(None, PluginManager(entry_points=False))
    'fcntl:///.workhive/locks'
    """
    if not isinstance(storage_url, str):
        return DEFAULT_LOCKS
    try:
        manager.get("locks", scheme_of(storage_url))
    except (ConfigError, PluginNotFound):
        # No locks for this scheme, or no scheme at all: a bad storage URL is reported when the
        # storage opens, by the code that knows what the URL should look like, not here.
        return DEFAULT_LOCKS
    return storage_url
