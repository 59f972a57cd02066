"""Every exception workhive raises, in one place.

The tree, so a caller can see at a glance what there is to catch::

    WorkhiveError
    ├── ConfigError (ValueError)            a URL, option or setting is malformed
    ├── PluginError
    │   ├── PluginNotFound (LookupError)    no installed plugin has that name/scheme
    │   ├── PluginConflict                  two distributions claim the same name
    │   ├── PluginLoadError (ImportError)   a plugin's module failed to import
    │   └── PluginValidationError           a hook returned something malformed
    ├── InvalidArgument (ValueError)        a bad value passed to the API
    │   ├── InvalidItem                     payload/result is not JSON-serialisable
    │   ├── BudgetUnsatisfiable             a call's token estimate can never fit the key's budget
    │   ├── InvalidName                     pool, worker or lock name is not allowed
    │   └── ScheduleExists                  a schedule by that name is stored already
    ├── NotFound (LookupError)
    │   ├── PoolNotFound
    │   ├── ItemNotFound
    │   ├── WorkerNotFound
    │   ├── ScheduleNotFound
    │   └── HiveNotFound                    a read-only command found no hive at that URL
    ├── LeaseLost                           stale fencing token: the claim is gone
    ├── StepsUnsupported                    the storage backend keeps no durable steps
    ├── WorkerLost                          this worker was reaped; it must stop
    ├── StorageError                        the backend itself failed
    │   ├── StorageUnavailable (ConnectionError)
    │   │   └── OutcomeUnknown              the connection dropped mid-call: applied once or not at all
    │   ├── StorageCorrupt                  the store's data is damaged
    │   └── SchemaVersionError              data written by a newer workhive
    ├── LockError
    │   ├── LockTimeout (TimeoutError)      names the current holder
    │   ├── LockNotHeld
    │   └── LockSystemError                 the lock mechanism failed (permissions, read-only FS…)
    ├── CredentialError
    │   └── NoCredentialAvailable           says when the next one frees up
    └── HandlerSignal                       raised BY a handler to steer the runtime
        ├── RateLimited                     cool the credential, retry without spending an attempt
        ├── AuthFailed                      disable the credential, retry with another
        └── Permanent                       poison the item at once

Each class's docstring is its default message; instances carry the offending
objects as attributes so a caller can act on them without parsing text.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthFailed",
    "BudgetUnsatisfiable",
    "ConfigError",
    "CredentialError",
    "HandlerSignal",
    "InvalidArgument",
    "InvalidItem",
    "InvalidName",
    "ItemNotFound",
    "LeaseLost",
    "LockError",
    "LockNotHeld",
    "LockSystemError",
    "LockTimeout",
    "NoCredentialAvailable",
    "NotFound",
    "Permanent",
    "PluginConflict",
    "PluginError",
    "PluginLoadError",
    "PluginNotFound",
    "PluginValidationError",
    "PoolNotFound",
    "RateLimited",
    "ScheduleExists",
    "ScheduleNotFound",
    "SchemaVersionError",
    "StorageError",
    "StepsUnsupported",
    "StorageUnavailable",
    "WorkerLost",
    "WorkerNotFound",
    "WorkhiveError",
]


class WorkhiveError(Exception):
    """A workhive operation failed."""

    def __init__(self, message: str | None = None, **context: Any) -> None:
        if message is None:
            message = (self.__class__.__doc__ or self.__class__.__name__).strip()
        super().__init__(message)
        self.message = message
        for key, value in context.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        return self.message


class ConfigError(WorkhiveError, ValueError):
    """The configuration is malformed: check the URL, option or setting named."""


class PluginError(WorkhiveError):
    """A plugin could not be used."""


class PluginNotFound(PluginError, LookupError):
    """No installed plugin provides that name; `workhive plugins` lists what is installed."""


class PluginConflict(PluginError):
    """Two installed plugins claim the same name; uninstall or block one of them."""


class PluginLoadError(PluginError, ImportError):
    """A plugin failed to import; reinstall it or block it with WORKHIVE_DISABLE_PLUGINS."""


class PluginValidationError(PluginError):
    """A plugin's hook returned something that is not a valid descriptor."""


class InvalidArgument(WorkhiveError, ValueError):
    """An argument has a value workhive cannot accept."""


class InvalidItem(InvalidArgument):
    """Item data must be JSON-serialisable (dict, list, str, int, float, bool, None)."""


class BudgetUnsatisfiable(InvalidArgument):
    """A call's token estimate is larger than the key's per-minute (or per-day) budget: it could never go."""


class InvalidName(InvalidArgument):
    """Names must be 1-200 characters of letters, digits and . _ : - (starting with a letter or digit)."""


class ScheduleExists(InvalidArgument):
    """A schedule by that name is stored already; remove it first or pick another name."""


class NotFound(WorkhiveError, LookupError):
    """The thing asked for does not exist."""


class PoolNotFound(NotFound):
    """No pool by that name; push to it first, or pick one `workhive status` lists."""


class ItemNotFound(NotFound):
    """No item with that id in this pool."""


class WorkerNotFound(NotFound):
    """No worker with that id is registered."""


class ScheduleNotFound(NotFound):
    """No schedule by that name; `workhive schedule list` shows them."""


class HiveNotFound(NotFound):
    """No hive exists at that storage URL; check the URL, or push to it first (reading never creates one)."""


class LeaseLost(WorkhiveError):
    """This claim is no longer valid (its lease expired or the item moved on); drop the item, do not retry the call."""


class StepsUnsupported(WorkhiveError):
    """This storage backend keeps no durable steps (``ctx.step``); use memory, SQLite, PostgreSQL or Redis storage.

    A third-party backend gains them by implementing ``workhive.storage.KeepsSteps``.
    """


class WorkerLost(WorkhiveError):
    """This worker was declared lost and its items were released; stop and register again."""


class StorageError(WorkhiveError):
    """The storage backend failed."""


class StorageUnavailable(StorageError, ConnectionError):
    """The storage backend cannot be reached or opened."""


class OutcomeUnknown(StorageUnavailable):
    """The connection dropped while the call was in flight: it was applied once or not at all.

    Retrying is safe for claims' fenced calls (a stale token is refused); check the item to learn which.
    """


class StorageCorrupt(StorageError):
    """The store's data is damaged; move the file aside and restore it from a backup."""


class SchemaVersionError(StorageError):
    """The store was written by a different workhive version; upgrade workhive or use another store."""


class LockError(WorkhiveError):
    """A lock operation failed."""


class LockTimeout(LockError, TimeoutError):
    """The lock is held by someone else and the wait timed out."""


class LockNotHeld(LockError):
    """This lock is not held by the caller (released already, or never acquired)."""


class LockSystemError(LockError):
    """The lock mechanism itself failed (permissions, missing or read-only directory), not "held by someone else"."""


class CredentialError(WorkhiveError):
    """A credential could not be provided."""


class NoCredentialAvailable(CredentialError):
    """Every credential is cooling down, parked or disabled."""


class HandlerSignal(WorkhiveError):
    """A handler asked the runtime to treat this failure specially."""


class RateLimited(HandlerSignal):
    """The API rate-limited this call; the credential cools down and the item is retried without spending an attempt.

    >>> raise RateLimited(retry_after=12.0)  # doctest: +SKIP
    """

    def __init__(self, message: str | None = None, *, retry_after: float | None = None) -> None:
        super().__init__(message or f"rate limited (retry after {retry_after}s)", retry_after=retry_after)


class AuthFailed(HandlerSignal):
    """The API refused the credential (401/403); it is disabled and the item retried with another."""

    def __init__(self, message: str | None = None, *, reason: str | None = None) -> None:
        super().__init__(message or f"authentication failed: {reason or 'refused'}", reason=reason)


class Permanent(HandlerSignal):
    """This item can never succeed (bad input, not a transient failure); it is poisoned at once."""
