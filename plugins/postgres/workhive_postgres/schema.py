"""The hive's own PostgreSQL schema: created on first open, versioned, migrated once.

Everything workhive stores lives in one schema (``workhive`` unless the URL
says ``?schema=``). Its ``meta`` table marks it as ours, its ``migrations``
table records each version applied. Opening checks the version without a
lock; only when something is to be done does it take a transaction-scoped
advisory lock, so fifty processes starting at once wait for the first one's
migration and then find nothing left to do.

Nothing here depends on the connection's ``search_path``: the statements name
the schema (``sqlfiles.statements``), and a migration sets ``search_path``
with ``SET LOCAL`` inside its own transaction, which a PgBouncer in
transaction mode keeps for exactly that transaction.
"""

from __future__ import annotations

from typing import Any

from workhive.errors import HiveNotFound, SchemaVersionError, StorageUnavailable
from workhive_postgres.sqlfiles import migrations, statements
from workhive_postgres.url import PostgresConfig

__all__ = ["SCHEMA_VERSION", "ensure_schema"]

SCHEMA_VERSION = len(migrations())


async def ensure_schema(conn: Any, config: PostgresConfig, *, create: bool) -> int:
    """Bring ``config.schema`` to ``SCHEMA_VERSION`` over asyncpg connection ``conn``; returns the version found.

    ``create=False`` raises ``HiveNotFound`` when the schema does not exist and changes nothing.
    """
    q = statements(config.schema)
    schema = config.schema
    exists = await conn.fetchval(q["schema_exists"], schema)
    if not exists and not create:
        raise HiveNotFound(
            f"no workhive hive in schema {schema!r} at {config.where}: push to it first (reading never creates "
            "one), or check the database and ?schema= in the URL",
            where=config.where,
            schema=schema,
        )
    if exists:
        version = await _version(conn, config)
        if version == SCHEMA_VERSION:
            return version
    async with conn.transaction():
        await conn.execute(q["migration_lock"], schema)
        # Looked at again under the lock: another process may have done it meanwhile.
        exists = await conn.fetchval(q["schema_exists"], schema)
        version = await _version(conn, config) if exists else 0
        if version == SCHEMA_VERSION:
            return version
        if not exists:
            await conn.execute(f'CREATE SCHEMA "{schema}"')  # schema names are checked by parse_url
        await conn.execute(f'SET LOCAL search_path = "{schema}"')
        for number, script in migrations()[version:]:
            await conn.execute(script)
            await conn.execute(q["record_migration"], number)
    return version


async def _version(conn: Any, config: PostgresConfig) -> int:
    """The schema's version (0: empty), refusing a schema that is not ours or is newer than this code."""
    import asyncpg

    q = statements(config.schema)
    schema = config.schema
    tables = set(await conn.fetch(q["schema_tables"], schema))
    names = {row[0] for row in tables}
    if not names:
        return 0
    if not {"meta", "migrations"} <= names:
        raise StorageUnavailable(
            f"schema {schema!r} at {config.where} exists and holds tables that are not workhive's "
            f"({', '.join(sorted(names)[:5])}); workhive never alters it: choose another schema with "
            "?schema=NAME in the storage URL",
            where=config.where,
            schema=schema,
        )
    # Read by schema-qualified names: through a pooler that drops search_path this once read
    # another schema's tables (or none), and that failure was taken for someone else's schema.
    try:
        row = await conn.fetchrow(q["schema_owner_and_version"])
    except (asyncpg.exceptions.UndefinedColumnError, asyncpg.exceptions.DatatypeMismatchError):
        row = {"owner": None}  # tables named like ours but shaped otherwise: someone else's
    if row["owner"] != "workhive":
        raise StorageUnavailable(
            f"schema {schema!r} at {config.where} belongs to {row['owner'] or 'something else'}, not workhive; "
            "choose another schema with ?schema=NAME in the storage URL",
            where=config.where,
            schema=schema,
        )
    version = int(row["version"])
    if version > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"schema {schema!r} at {config.where} has workhive schema version {version}, but this "
            f"workhive-postgres knows only up to {SCHEMA_VERSION}: upgrade it (pip install -U workhive-postgres) "
            "or use another schema",
            where=config.where,
            schema=schema,
            found=version,
            supported=SCHEMA_VERSION,
        )
    return version
