"""workhive-flatmachines: flatmachines' worker protocols, checkpoints and execution locks on any workhive storage.

>>> from workhive_flatmachines import WorkhiveWorkerHooks  # doctest: +SKIP
>>> hooks = WorkhiveWorkerHooks(storage="sqlite:///data/workers.db")  # doctest: +SKIP

The classes load flatmachines when first used: this package is also a
workhive plugin (``workhive import flatmachines``), and the CLI imports it at
start-up.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from workhive_flatmachines.backends import backends
    from workhive_flatmachines.checkpoints import WorkhiveExecutionLock, WorkhivePersistence, hive_checkpoints
    from workhive_flatmachines.connection import HiveHandle, shared_handle
    from workhive_flatmachines.errors import ClaimLost, ExecutionTakenOver, NotJSON
    from workhive_flatmachines.hooks import WorkhiveWorkerHooks, register_hooks
    from workhive_flatmachines.importer import ImportReport, import_flatmachines
    from workhive_flatmachines.registration import WorkhiveRegistrationBackend
    from workhive_flatmachines.work import ClaimId, WorkhiveWorkBackend, WorkhiveWorkPool

__all__ = [
    "ClaimId",
    "ClaimLost",
    "ExecutionTakenOver",
    "HiveHandle",
    "NotJSON",
    "WorkhiveExecutionLock",
    "WorkhivePersistence",
    "backends",
    "hive_checkpoints",
    "register_hooks",
    "shared_handle",
    "ImportReport",
    "WorkhiveRegistrationBackend",
    "WorkhiveWorkBackend",
    "WorkhiveWorkPool",
    "WorkhiveWorkerHooks",
    "import_flatmachines",
]

_WHERE = {
    "ClaimId": "work",
    "ClaimLost": "errors",
    "ExecutionTakenOver": "errors",
    "NotJSON": "errors",
    "WorkhiveExecutionLock": "checkpoints",
    "WorkhivePersistence": "checkpoints",
    "backends": "backends",
    "hive_checkpoints": "checkpoints",
    "register_hooks": "hooks",
    "shared_handle": "connection",
    "HiveHandle": "connection",
    "ImportReport": "importer",
    "WorkhiveRegistrationBackend": "registration",
    "WorkhiveWorkBackend": "work",
    "WorkhiveWorkPool": "work",
    "WorkhiveWorkerHooks": "hooks",
    "import_flatmachines": "importer",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'workhive_flatmachines' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"workhive_flatmachines.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
