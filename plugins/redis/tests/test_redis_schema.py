"""``schema.py``: the version record marks a prefix as a hive; foreign keys and newer layouts are refused."""

from __future__ import annotations

import asyncio

import pytest
import redis as redis_py
from redis_server import REDIS_URL, keys_of, new_prefix, url_for
from workhive_redis import schema
from workhive_redis.connections import RedisClient
from workhive_redis.keys import HiveKeys

import workhive
from workhive.errors import SchemaVersionError, StorageError


def test_a_hive_created_by_another_process_while_this_one_opens_is_not_foreign(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two processes opening a new prefix at once: the one that looks second sees the first's version key.

    The other process is simulated where the race is: between reading that there is no version key
    and scanning the prefix for foreign keys.
    """
    prefix = new_prefix()
    looked = schema.find_keys

    async def other_process_opens_first(client: RedisClient, keys: HiveKeys) -> str | None:
        monkeypatch.setattr(schema, "find_keys", looked)
        async with workhive.open(url_for(prefix)):  # creates the hive's version record
            pass
        return await looked(client, keys)  # finds that record: no version key when TYPE was asked, one now

    async def main() -> None:
        monkeypatch.setattr(schema, "find_keys", other_process_opens_first)
        async with workhive.open(url_for(prefix)) as hive:
            await hive.pool("p").push({"n": 1})
        async with workhive.open(url_for(prefix), create=False) as hive:
            assert (await hive.pool("p").stats()).pending == 1

    asyncio.run(main())


def test_many_processes_opening_one_new_prefix_at_once_all_open() -> None:
    prefix = new_prefix()

    async def main() -> None:
        hives = [workhive.open(url_for(prefix)) for _ in range(12)]
        try:
            await asyncio.gather(*(h.open() for h in hives))
        finally:
            await asyncio.gather(*(h.close() for h in hives))

    asyncio.run(main())


def test_foreign_keys_or_a_newer_layout_under_the_prefix_are_refused_and_left_alone() -> None:
    foreign, newer = new_prefix(), new_prefix()
    client = redis_py.Redis.from_url(REDIS_URL.split("?")[0], decode_responses=True)
    try:
        client.set(f"{{{foreign}}}:something", "theirs")
        client.hset(f"{{{newer}}}:version", mapping={"by": "workhive-redis", "schema": "99"})
    finally:
        client.close()

    async def main() -> None:
        with pytest.raises(StorageError, match="another program"):
            async with workhive.open(url_for(foreign)):
                pass
        with pytest.raises(SchemaVersionError, match="newer"):
            async with workhive.open(url_for(newer)):
                pass

    asyncio.run(main())
    assert keys_of(foreign) == [f"{{{foreign}}}:something"]
    assert keys_of(newer) == [f"{{{newer}}}:version"]
