"""workhive-dashboard: a live web view of a hive, served by ``workhive dashboard``.

>>> from workhive_dashboard import DashboardSettings, create_app  # doctest: +SKIP
>>> app = create_app(DashboardSettings(storage="sqlite:///.workhive/hive.db"))
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workhive_dashboard.app import create_app
    from workhive_dashboard.settings import DashboardSettings

__all__ = ["DashboardSettings", "create_app"]


def __getattr__(name: str) -> Any:
    # Loaded on first use: the plugin entry point (workhive_dashboard.plugin) imports this
    # package, and every `workhive.open` in every worker process loads the plugins; the web
    # stack must not come with them.
    if name == "create_app":
        from workhive_dashboard.app import create_app

        return create_app
    if name == "DashboardSettings":
        from workhive_dashboard.settings import DashboardSettings

        return DashboardSettings
    raise AttributeError(f"module 'workhive_dashboard' has no attribute {name!r}")
