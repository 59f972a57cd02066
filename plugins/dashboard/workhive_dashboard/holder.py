"""The dashboard's one hive: opened only if it exists, reopened after a failure.

The dashboard reads and changes what is there; it never makes a hive. Pointed
at one that does not exist (a SQLite file or directory that is missing, a
PostgreSQL schema or a Redis prefix with no hive) it opens the storage with
``create=False`` (rule F1 of ``workhive.storage``), which raises
``HiveNotFound`` and creates nothing, like ``workhive status``.
"""

from __future__ import annotations

import asyncio
import contextlib

from workhive.errors import ConfigError
from workhive.hive import Hive
from workhive.hive import open as open_hive
from workhive.plugin_manager import PluginManager
from workhive_dashboard.settings import DashboardSettings

__all__ = ["HiveHolder", "open_existing"]


def open_existing(settings: DashboardSettings, manager: PluginManager | None) -> Hive:
    """The hive at ``settings.storage``, built with ``create=False`` (not opened yet).

    ``HiveNotFound`` comes from ``Hive.open()`` when there is no hive there.

    >>> hive = open_existing(DashboardSettings(storage="sqlite:///hive.db"), None)  # doctest: +SKIP
    """
    try:
        return open_hive(settings.storage, locks=settings.locks, manager=manager, create=False)
    except (ConfigError, TypeError) as exc:
        # A storage plugin from before every factory took ``create`` refuses the option; open it
        # as it opens, as `workhive status` does (in-memory and server stores create nothing here).
        if "create" not in str(exc):
            raise
        return open_hive(settings.storage, locks=settings.locks, manager=manager)


class HiveHolder:
    """Opens the hive on first use and again after a failure, so a dashboard started before its
    storage is reachable (or before its hive exists) shows why, and recovers by itself once it is.

    >>> hive = await HiveHolder(settings, None).get()  # doctest: +SKIP
    """

    def __init__(self, settings: DashboardSettings, manager: PluginManager | None) -> None:
        self._settings = settings
        self._manager = manager
        self._hive: Hive | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> Hive:
        """The open hive; ``HiveNotFound`` when none exists, a driver's error when storage is unreachable."""
        async with self._lock:
            if self._hive is None:
                hive = open_existing(self._settings, self._manager)
                await hive.open()
                self._hive = hive
            return self._hive

    async def drop(self) -> None:
        """Close the hive (if open); the next ``get`` opens it again."""
        async with self._lock:
            hive, self._hive = self._hive, None
        if hive is not None:
            with contextlib.suppress(Exception):
                await hive.close()
