"""How driver and network failures become workhive errors that name the server, never the password.

The classes are the core's (``workhive.errors``); this module only decides
which one a failure is and writes the message.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

from workhive.errors import InvalidArgument, InvalidItem, StorageError, StorageUnavailable, WorkhiveError
from workhive_postgres.url import PostgresConfig

__all__ = [
    "connection_errors",
    "ended_by_server",
    "is_connection_loss",
    "is_retryable_conflict",
    "open_failure",
    "statement_failure",
]


def connection_errors() -> tuple[type[BaseException], ...]:
    """Exceptions that mean the connection (not the statement) failed: retry, or ask what happened."""
    import asyncpg

    return (
        OSError,
        asyncio.TimeoutError,
        asyncpg.PostgresConnectionError,  # class 08, and ConnectionDoesNotExistError
        asyncpg.exceptions.OperatorInterventionError,  # admin shutdown, crash, cannot connect now
        asyncpg.exceptions.TooManyConnectionsError,
        asyncpg.exceptions.InterfaceError,
    )


def ended_by_server(exc: BaseException) -> bool:
    """An established session went away (ended by the server or the network), not one never made."""
    import asyncpg

    if isinstance(exc, asyncpg.exceptions.InterfaceError):
        # Only "connection closed"/"does not exist" flavours; misuse is a bug, not a loss.
        return "closed" in str(exc)
    return isinstance(
        exc,
        (
            # "cannot switch to state …; another operation is in progress": the server ended
            # the session (pg_terminate_backend) while the connection sat idle in the pool.
            asyncpg.exceptions.InternalClientError,
            asyncpg.exceptions.ConnectionDoesNotExistError,
            asyncpg.exceptions.AdminShutdownError,
            ConnectionResetError,
            BrokenPipeError,
        ),
    )


def is_connection_loss(exc: BaseException) -> bool:
    import asyncpg

    if isinstance(exc, asyncpg.exceptions.QueryCanceledError):
        return False  # statement_timeout or a cancel: the statement failed, the connection is fine
    if isinstance(exc, asyncpg.exceptions.InterfaceError):
        return ended_by_server(exc)  # a closed connection; any other InterfaceError is misuse, not a loss
    if isinstance(exc, (TimeoutError, asyncio.TimeoutError)):  # one class from 3.11 on
        return True  # command_timeout: no answer in time (stalled or half-open): as good as lost
    return ended_by_server(exc) or isinstance(exc, connection_errors())


def is_retryable_conflict(exc: BaseException) -> bool:
    """A deadlock or serialization failure: the transaction was rolled back whole; run it again."""
    import asyncpg

    return isinstance(exc, (asyncpg.exceptions.DeadlockDetectedError, asyncpg.exceptions.SerializationError))


def open_failure(config: PostgresConfig, exc: BaseException) -> StorageUnavailable:
    """Why the server at ``config`` could not be opened, and what to do about it."""
    import asyncpg

    where, user = config.where, config.user or "(default user)"
    if isinstance(exc, asyncpg.exceptions.InvalidPasswordError):
        text = f"PostgreSQL at {where} refused the password for user {user}; check the password in the storage URL"
    elif isinstance(exc, asyncpg.exceptions.InvalidAuthorizationSpecificationError):
        text = (
            f"PostgreSQL at {where} refused user {user} ({_first_line(exc)}); check the user in the storage URL "
            "and the server's pg_hba.conf"
        )
    elif isinstance(exc, asyncpg.exceptions.InvalidCatalogNameError):
        text = (
            f"database {config.database!r} does not exist at {where}; create it (createdb {config.database}) "
            "or fix the database name in the storage URL"
        )
    elif "unsupported startup parameter" in str(exc):
        # PgBouncer's answer to a setting it does not pass on (this plugin sends such only when
        # it was not told it talks to a PgBouncer: the locks' TCP keepalives).
        text = (
            f"{where} looks like a PgBouncer ({_first_line(exc)}): add ?pgbouncer=session or "
            "?pgbouncer=transaction (its pool_mode) to the storage URL"
        )
    elif isinstance(exc, asyncpg.exceptions.TooManyConnectionsError):
        text = f"PostgreSQL at {where} has no connection slots left; lower ?pool_size= or raise max_connections"
    elif isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        text = (
            f"PostgreSQL at {where} did not answer within {config.connect_timeout:g}s; check the host and port "
            "and that the server is up (raise ?connect_timeout= for a slow network)"
        )
    elif isinstance(exc, ssl.SSLCertVerificationError):
        text = _certificate_problem(config, exc)
    elif isinstance(exc, OSError) and (
        "Name or service" in str(exc) or "nodename" in str(exc) or "getaddrinfo" in str(exc)
    ):
        text = f"cannot resolve the host of {where}: check the host name in the storage URL"
    elif isinstance(exc, OSError):
        text = (
            f"cannot connect to PostgreSQL at {where} ({exc.strerror or _first_line(exc)}); check that the "
            "server is running and listening there"
        )
    else:
        text = f"cannot open PostgreSQL at {where}: {type(exc).__name__}: {_first_line(exc)}"
    return StorageUnavailable(text, where=where)


def statement_failure(config: PostgresConfig, exc: BaseException, what: str) -> WorkhiveError:
    """A statement the server refused: too large, bad data, or anything else, naming the server."""
    import asyncpg

    where = config.where
    if isinstance(exc, asyncpg.exceptions.ProgramLimitExceededError):
        return InvalidItem(
            f"{what} is too large for PostgreSQL at {where} ({_first_line(exc)}); nothing was stored: "
            "store big data elsewhere and push a reference to it",
            where=where,
        )
    if isinstance(exc, asyncpg.exceptions.DataError):
        return InvalidArgument(
            f"{what}: PostgreSQL at {where} refused a value ({_first_line(exc)}); nothing was changed", where=where
        )
    errors = asyncpg.exceptions
    statement_clash = (errors.DuplicatePreparedStatementError, errors.InvalidSQLStatementNameError)
    if isinstance(exc, statement_clash) and config.pgbouncer is None:
        # Prepared statements meeting other clients' on one server connection: transaction pooling.
        return StorageUnavailable(
            f"{what} failed at {where}: {_first_line(exc)}; this happens behind a PgBouncer in transaction "
            "mode: add ?pgbouncer=transaction to the storage URL",
            where=where,
        )
    if isinstance(exc, asyncpg.exceptions.UndefinedTableError):
        return StorageUnavailable(
            f"the workhive schema {config.schema!r} at {where} is missing its tables (dropped while open?); "
            "reopen the hive to recreate it",
            where=where,
        )
    return StorageError(f"{what} failed at PostgreSQL {where}: {type(exc).__name__}: {_first_line(exc)}", where=where)


def _certificate_problem(config: PostgresConfig, exc: ssl.SSLCertVerificationError) -> str:
    """A server certificate that the URL's CA (named) does not vouch for, or not for this host: not retried."""
    detail = exc.verify_message or _first_line(exc)
    if "hostname" in detail.lower() or "ip address mismatch" in detail.lower():
        advice = (
            f"the certificate is not issued for {config.host}: connect by a name it lists (subjectAltName), "
            "or use sslmode=verify-ca, which checks the CA only"
        )
    else:
        advice = (
            f"the certificate is not signed by the CA in {config.sslrootcert_shown}: set ?sslrootcert= to the "
            "CA file that signed the server's certificate"
        )
    return f"PostgreSQL at {config.where}: TLS certificate problem ({detail}); {advice}"


def _first_line(exc: Any) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
