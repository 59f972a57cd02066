"""workhive-dashboard: a live web view of a hive, served by ``workhive dashboard``.

>>> from workhive_dashboard import DashboardSettings, create_app  # doctest: +SKIP
>>> app = create_app(DashboardSettings(storage="sqlite:///.workhive/hive.db"))
"""

from workhive_dashboard.app import create_app
from workhive_dashboard.settings import DashboardSettings

__all__ = ["DashboardSettings", "create_app"]
