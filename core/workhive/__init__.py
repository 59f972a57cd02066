"""workhive: fleets of workers over shared work pools.

The public API is what this module exports; everything else is private.

>>> import asyncio, workhive  # doctest: +SKIP
>>> async def main():
...     async with workhive.open("sqlite:///.workhive/hive.db") as hive:
...         pool = hive.pool("summaries")
...         await pool.push({"url": "https://example.com"})
...         item = await pool.claim(worker_id="me")
...         await pool.complete(item, {"summary": "…"})
>>> asyncio.run(main())
"""

from workhive.backoff import BackoffStrategy
from workhive.budgets import Budget, BudgetTake, TakesBudget
from workhive.credentials import (
    Credential,
    CredentialPool,
    CredentialProvider,
    CredentialState,
    Outcome,
    Secret,
    Verdict,
    classify,
)
from workhive.defaults import default_locks_url
from workhive.errors import (
    AuthFailed,
    BudgetUnsatisfiable,
    ConfigError,
    CredentialError,
    HandlerSignal,
    HiveNotFound,
    InvalidArgument,
    InvalidItem,
    InvalidName,
    ItemNotFound,
    LeaseLost,
    LockError,
    LockNotHeld,
    LockSystemError,
    LockTimeout,
    NoCredentialAvailable,
    NotFound,
    OutcomeUnknown,
    Permanent,
    PluginConflict,
    PluginError,
    PluginLoadError,
    PluginNotFound,
    PluginValidationError,
    PoolNotFound,
    RateLimited,
    ScheduleExists,
    ScheduleNotFound,
    SchemaVersionError,
    StepsUnsupported,
    StorageCorrupt,
    StorageError,
    StorageUnavailable,
    WorkerLost,
    WorkerNotFound,
    WorkhiveError,
)
from workhive.hive import DEFAULT_LOCKS, DEFAULT_STORAGE, Hive, open
from workhive.hookspecs import hookimpl
from workhive.locks import HeldLock, LockHolder, LockProvider
from workhive.models import (
    Ack,
    GroupReport,
    GroupStats,
    ItemState,
    Job,
    NewItem,
    PoolStats,
    ReapedWorker,
    StepRecord,
    WorkerFilter,
    WorkerRecord,
    WorkerRegistration,
    WorkerStatus,
    WorkItem,
)
from workhive.plugin_manager import PluginInfo, PluginManager
from workhive.plugin_types import BackoffPlugin, CredentialsPlugin, LocksPlugin, StoragePlugin
from workhive.pool import Pool
from workhive.schedules import Fired, Schedule, Schedules, StoresSchedules
from workhive.shared_state import SharedState
from workhive.storage import Cancels, CompletesAndClaims, KeepsSteps, ServesGroups, StorageBackend
from workhive.urls import redact_url
from workhive.workers import Workers

__all__ = [
    "AuthFailed",
    "HandlerSignal",
    "Permanent",
    "RateLimited",
    "DEFAULT_LOCKS",
    "DEFAULT_STORAGE",
    "Ack",
    "BackoffPlugin",
    "BackoffStrategy",
    "Budget",
    "BudgetTake",
    "BudgetUnsatisfiable",
    "ConfigError",
    "CredentialError",
    "CredentialsPlugin",
    "Credential",
    "CredentialPool",
    "CredentialProvider",
    "CredentialState",
    "Outcome",
    "Secret",
    "Verdict",
    "classify",
    "default_locks_url",
    "Cancels",
    "CompletesAndClaims",
    "GroupReport",
    "GroupStats",
    "HeldLock",
    "HiveNotFound",
    "Hive",
    "InvalidArgument",
    "InvalidItem",
    "InvalidName",
    "ItemNotFound",
    "ItemState",
    "Job",
    "LeaseLost",
    "LockError",
    "LockHolder",
    "LockNotHeld",
    "LockSystemError",
    "LockProvider",
    "LockTimeout",
    "LocksPlugin",
    "NewItem",
    "NoCredentialAvailable",
    "NotFound",
    "OutcomeUnknown",
    "PluginConflict",
    "PluginError",
    "PluginInfo",
    "PluginLoadError",
    "PluginManager",
    "PluginNotFound",
    "PluginValidationError",
    "Pool",
    "PoolNotFound",
    "PoolStats",
    "ReapedWorker",
    "Fired",
    "Schedule",
    "ScheduleExists",
    "ScheduleNotFound",
    "Schedules",
    "SchemaVersionError",
    "ServesGroups",
    "SharedState",
    "StoresSchedules",
    "StepRecord",
    "StepsUnsupported",
    "KeepsSteps",
    "TakesBudget",
    "StorageBackend",
    "StorageCorrupt",
    "StorageError",
    "StoragePlugin",
    "StorageUnavailable",
    "WorkItem",
    "WorkerFilter",
    "WorkerLost",
    "WorkerNotFound",
    "WorkerRecord",
    "WorkerRegistration",
    "WorkerStatus",
    "Workers",
    "WorkhiveError",
    "hookimpl",
    "open",
    "redact_url",
]
