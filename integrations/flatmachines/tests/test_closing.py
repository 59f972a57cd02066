"""The hive behind the adapter opens in the running loop and closes with it (flatmachines never closes a backend)."""

from __future__ import annotations

import asyncio

import pytest

import workhive
from workhive_flatmachines import HiveHandle, WorkhiveWorkBackend


class TestClosing:
    def test_the_hive_closes_when_asyncio_run_ends_and_reopens_in_the_next_loop(self, tmp_path) -> None:  # type: ignore[no-untyped-def]
        handle = HiveHandle(f"sqlite:///{tmp_path / 'hive.db'}")
        pool = WorkhiveWorkBackend(handle).pool("jobs")
        storage = handle._hive.storage

        async def push() -> None:
            await pool.push({"task": 1})
            await pool.claim("w1")  # starts a background renewal task, cancelled at shutdown
            assert storage._conn is not None  # type: ignore[attr-defined]

        asyncio.run(push())
        assert storage._conn is None  # type: ignore[attr-defined]

        async def size() -> int:
            return await pool.size()

        assert asyncio.run(size()) == 0
        assert storage._conn is None  # type: ignore[attr-defined]

    @pytest.mark.asyncio
    async def test_a_hive_passed_in_is_left_open(self) -> None:
        async with workhive.open("memory://") as hive:
            handle = HiveHandle(hive)
            await WorkhiveWorkBackend(handle).pool("jobs").push({"task": 1})
            await handle.aclose()
            assert await hive.pool("jobs").size() == 1

    def test_a_bad_storage_url_fails_when_the_hooks_are_built(self) -> None:
        with pytest.raises(workhive.PluginNotFound, match="nosuch"):
            HiveHandle("nosuch://x")
        with pytest.raises(workhive.ConfigError):
            HiveHandle("")
        with pytest.raises(workhive.InvalidArgument, match="heartbeat_every"):
            HiveHandle("memory://", lease=10, heartbeat_every=10)
