"""The hive's layout on Redis: a version record written once, checked at every open.

Redis has no tables to create: keys appear as items are pushed
(``workhive_redis.keys``), and the scripts that write them are read from
``lua/`` by ``workhive_redis.luafiles`` (the counterpart of PostgreSQL's
``sqlfiles.py``). What this module keeps is the version record
``{prefix}:version`` (``by``: the owner, ``schema``: the layout version),
which marks the prefix as workhive's and refuses a layout newer than this code.
"""

from __future__ import annotations

from workhive.errors import HiveNotFound, SchemaVersionError, StorageError
from workhive_redis.connections import RedisClient
from workhive_redis.keys import HiveKeys
from workhive_redis.url import RedisConfig

__all__ = ["OWNER", "SCHEMA_VERSION", "ensure_schema", "find_keys"]

#: the layout of keys and records this code writes; a store with a higher one is refused
SCHEMA_VERSION = 1
OWNER = "workhive-redis"


async def ensure_schema(client: RedisClient, keys: HiveKeys, config: RedisConfig, *, create: bool) -> None:
    """Write the version record of a new hive, or check an existing one's (``create=False``: never write).

    Raises ``HiveNotFound`` (nothing under the prefix and ``create=False``),
    ``StorageError`` (keys under the prefix that workhive did not write) or
    ``SchemaVersionError`` (written by a newer workhive-redis).
    """
    where = f"{config.display} prefix {config.prefix!r}"
    kind = await client.command("TYPE", keys.version)
    if kind == "none":
        foreign = await find_keys(client, keys)
        # Another process may have created this hive since TYPE answered: its keys are ours.
        if foreign is not None and await client.command("TYPE", keys.version) == "none":
            raise StorageError(
                f"Redis at {config.where} has keys under the prefix {config.prefix!r} that workhive "
                f"did not write (e.g. {foreign!r}) and no workhive version key: another program uses this "
                "prefix. Choose another one with ?prefix=NAME in the URL",
                where=config.where,
            )
        if foreign is None and not create:
            raise HiveNotFound(
                f"no hive at {where}: nothing is stored under that prefix. Check the URL and ?prefix=, "
                "or push to it first (reading never creates one)",
                where=config.where,
            )
        # One script: processes opening a new hive at once all see the whole record.
        await client.run("init_version", [keys.version], [OWNER, str(SCHEMA_VERSION)])
    record = await client.command("HGETALL", keys.version)
    if record.get("by") != OWNER or not str(record.get("schema", "")).isdigit():
        raise StorageError(
            f"Redis at {config.where}: the version record {keys.version!r} was not written by workhive "
            f"({record!r}); choose another prefix with ?prefix=NAME",
            where=config.where,
        )
    schema = int(record["schema"])
    if schema > SCHEMA_VERSION:
        raise SchemaVersionError(
            f"the hive at {where} was written by a newer workhive-redis (layout {schema}; this one "
            f"reads up to {SCHEMA_VERSION}); upgrade workhive-redis: pip install -U workhive-redis",
            where=config.where,
        )


async def find_keys(client: RedisClient, keys: HiveKeys) -> str | None:
    """One key under this prefix, if any (a prefix used by someone else, or a half-deleted hive).

    On a Redis Cluster every master is scanned: each holds the keys of its slots.
    """
    primaries = getattr(client, "primaries", None)
    for node in primaries() if primaries is not None else [client]:
        for pattern in keys.patterns:
            cursor = "0"
            while True:
                cursor, found = await node.command("SCAN", cursor, "MATCH", pattern, "COUNT", 1000)
                if found:
                    return str(found[0])
                if cursor == "0" or cursor == 0:
                    break
    return None
