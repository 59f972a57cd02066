"""How driver and network failures become workhive errors that name the server, never the password.

The classes are the core's (``workhive.errors``); this module only decides
which one a failure is and writes the message. Who retries what is
``workhive_redis.connections``' business.
"""

from __future__ import annotations

from typing import Any

from workhive.errors import OutcomeUnknown, StorageError, StorageUnavailable
from workhive_redis.url import RedisConfig

__all__ = ["dropped_in_flight", "reason", "refusal", "still_loading", "unreachable"]


def reason(exc: BaseException) -> str:
    """The first line of a driver error, cut to 300 characters: what messages quote."""
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:300]


def refusal(config: RedisConfig, errors: Any, exc: Exception) -> StorageError:
    """A command the server refused for good (login, ACL, database index, memory): what to do about it.

    ``errors`` is the driver's ``redis.exceptions`` module (imported only once a store opens).
    """
    where = config.where
    text = reason(exc)
    if isinstance(exc, errors.AuthenticationError) or "WRONGPASS" in text or "NOAUTH" in text:
        return StorageUnavailable(
            f"Redis at {where} refused the login ({text}); check the user name and password in the URL",
            where=where,
        )
    if isinstance(exc, errors.NoPermissionError) or "NOPERM" in text:
        return StorageUnavailable(
            f"Redis at {where} does not let this user run what workhive needs ({text}); grant it "
            "+@scripting (EVALSHA, SCRIPT LOAD), +@pubsub and read/write on the prefix's keys",
            where=where,
        )
    if "DB index is out of range" in text or "invalid DB index" in text:
        return StorageUnavailable(
            f"Redis at {where} has no database {config.db} ({text}); use a smaller number in the URL "
            "(redis://host:port/0) or raise the server's `databases` setting",
            where=where,
        )
    if text.startswith("OOM"):
        return StorageError(
            f"Redis at {where} is out of memory ({text}); nothing was stored. Free memory, raise maxmemory, "
            "or purge finished items (workhive purge)",
            where=where,
        )
    return StorageError(f"Redis at {where} refused the command: {text}", where=where)


def still_loading(config: RedisConfig, waited: float, budget: float) -> StorageUnavailable:
    """The server kept answering ``LOADING`` (reading its data after a restart) for the whole wait."""
    return StorageUnavailable(
        f"Redis at {config.where} is still loading its data set after workhive waited "
        f"{round(waited, 1):g}s (retry_for={budget:g}); try again once it "
        "has loaded, or wait longer with ?retry_for=SECONDS in the URL",
        where=config.where,
    )


def dropped_in_flight(config: RedisConfig, exc: BaseException) -> OutcomeUnknown:
    """The connection dropped while a write was in flight: applied once or not at all."""
    return OutcomeUnknown(
        f"the connection to Redis at {config.where} dropped while a write was in flight "
        f"({reason(exc)}): it was applied once or not at all",
        where=config.where,
    )


def unreachable(config: RedisConfig, exc: BaseException, budget: float) -> StorageUnavailable:
    """No connection to the server for ``budget`` seconds of retries."""
    return StorageUnavailable(
        f"cannot reach Redis at {config.where}: {reason(exc)} (retried for {budget:g}s); "
        "check that the server runs and the URL's host and port",
        where=config.where,
    )
