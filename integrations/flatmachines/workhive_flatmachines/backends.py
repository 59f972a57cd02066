"""``backends(storage)``: flatmachines' registration and work backends on one hive, in one line.

>>> registration, work = backends("memory://jobs")
>>> registration.handle is work.handle
True
"""

from __future__ import annotations

from typing import Any

import workhive
from workhive_flatmachines.connection import HiveHandle, open_handle
from workhive_flatmachines.registration import WorkhiveRegistrationBackend
from workhive_flatmachines.work import WorkhiveWorkBackend

__all__ = ["backends"]


def backends(
    storage: str | workhive.Hive | HiveHandle | None = None,
    *,
    retry_in: float | None = 0.0,
    leases: dict[str, float] | None = None,
    **options: Any,
) -> tuple[WorkhiveRegistrationBackend, WorkhiveWorkBackend]:
    """``(registration, work)`` sharing one hive handle (the process's shared one for a URL).

    Replaces ``SQLiteRegistrationBackend(db_path=…)`` plus
    ``SQLiteWorkBackend(db_path=…)``; building both from one handle is what
    keeps one process from opening one SQLite file twice.
    """
    handle = open_handle(storage, options)
    return WorkhiveRegistrationBackend(handle), WorkhiveWorkBackend(handle, retry_in=retry_in, leases=leases)
