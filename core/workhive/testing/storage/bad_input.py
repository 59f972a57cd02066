"""Bad input: rules V1 of the storage contract.

A specific error, and nothing stored.

The rules are the table in ``workhive/storage.py``; ``StorageContract`` mixes this family in.
"""

from __future__ import annotations

import math
from typing import Any

import pytest

from workhive.errors import InvalidArgument, InvalidItem, InvalidName
from workhive.hive import Hive
from workhive.models import ItemState, Job
from workhive.testing.storage.base import ContractBase


class BadInputRules(ContractBase):
    """Rules V1: a specific error, and nothing stored."""

    @pytest.mark.asyncio
    @pytest.mark.parametrize(
        "payload",
        [math.nan, math.inf, {1, 2}, object(), b"bytes", {"nested": [float("nan")]}, {"k": object()}],
        ids=["nan", "inf", "set", "object", "bytes", "nested-nan", "nested-object"],
    )
    async def test_non_json_payload_is_refused(self, hive: Hive, payload: Any) -> None:
        """[V1] a payload that is not JSON raises ``InvalidItem``, alone or in a batch, and nothing is stored."""
        pool = hive.pool("jobs")
        await pool.push("existing")
        before = await self._snapshot(hive)
        with pytest.raises(InvalidItem, match="JSON"):
            await pool.push(payload)
        with pytest.raises(InvalidItem):
            await pool.push_many(["fine", payload])
        with pytest.raises(InvalidItem):
            await pool.push_many([Job("fine"), Job(payload)])
        assert await self._snapshot(hive) == before

    @pytest.mark.asyncio
    async def test_non_json_result_is_refused_and_the_claim_kept(self, hive: Hive) -> None:
        """[V1] a result that is not JSON raises ``InvalidItem`` and the claim is kept."""
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool)
        with pytest.raises(InvalidItem):
            await pool.complete(item, {"bad": {1, 2}})
        assert (await pool.get(item.id)).state is ItemState.CLAIMED
        await pool.complete(item, "ok")

    @pytest.mark.asyncio
    @pytest.mark.parametrize(
        ("option", "value"),
        [
            ("priority", -1),
            ("priority", 1.5),
            ("priority", math.nan),
            ("delay", -1.0),
            ("delay", math.nan),
            ("delay", math.inf),
            ("max_attempts", 0),
            ("max_attempts", -3),
            ("dedup_key", ""),
            ("dedup_key", 42),
        ],
    )
    async def test_bad_push_options_are_refused(self, hive: Hive, option: str, value: Any) -> None:
        """[V1] a bad priority, delay, max_attempts or dedup_key raises ``InvalidArgument``.

        The error names the option, and nothing is stored.
        """
        pool = hive.pool("jobs")
        await pool.push("existing")
        before = await self._snapshot(hive)
        with pytest.raises(InvalidArgument, match=option):
            await pool.push("x", **{option: value})
        with pytest.raises(InvalidArgument, match=option):
            await pool.push_many(["ok", Job("x", **{option: value})])
        assert await self._snapshot(hive) == before

    @pytest.mark.asyncio
    @pytest.mark.parametrize("lease", [0, -1.0, math.nan, math.inf])
    async def test_bad_lease_is_refused(self, hive: Hive, lease: float) -> None:
        """[V1] a lease that is not a positive finite number raises ``InvalidArgument``.

        For claim, claim_many and extend; nothing changes.
        """
        pool = hive.pool("jobs")
        await pool.push("x")
        before = await self._snapshot(hive)
        with pytest.raises(InvalidArgument, match="lease"):
            await pool.claim("w1", lease=lease)
        with pytest.raises(InvalidArgument, match="lease"):
            await pool.claim_many(2, "w1", lease=lease)
        assert await self._snapshot(hive) == before
        item = await self.must_claim(pool)
        with pytest.raises(InvalidArgument, match="lease"):
            await pool.extend(item, lease)
        assert await self.raw(hive, "jobs", item.id) == item

    @pytest.mark.asyncio
    @pytest.mark.parametrize("n", [0, -1, 10_001, 1.0])
    async def test_bad_claim_count_is_refused(self, hive: Hive, n: Any) -> None:
        """[V1] ``claim_many`` with a count that is not an int from 1 to 10,000 raises ``InvalidArgument``."""
        pool = hive.pool("jobs")
        await pool.push("x")
        before = await self._snapshot(hive)
        with pytest.raises(InvalidArgument, match="n must be"):
            await pool.claim_many(n, "w1")
        assert await self._snapshot(hive) == before

    @pytest.mark.asyncio
    async def test_bad_fail_and_release_arguments_change_nothing(self, hive: Hive) -> None:
        """[V1] a bad ``retry_in``, ``delay`` or ``older_than`` raises ``InvalidArgument`` and the claim is kept."""
        pool = hive.pool("jobs")
        await pool.push("x")
        item = await self.must_claim(pool)
        for bad in (-1.0, math.nan, math.inf):
            with pytest.raises(InvalidArgument, match="retry_in"):
                await pool.fail(item, "x", retry_in=bad)
            with pytest.raises(InvalidArgument, match="delay"):
                await pool.release(item, delay=bad)
        assert await self.raw(hive, "jobs", item.id) == item
        with pytest.raises(InvalidArgument, match="older_than"):
            await pool.purge(-1)

    @pytest.mark.asyncio
    @pytest.mark.parametrize("name", ["", " jobs", "has space", "-dash-first", "a/b", "x" * 201, 42, None])
    async def test_bad_pool_names_are_refused(self, hive: Hive, name: Any) -> None:
        """[V1] a bad pool name raises ``InvalidName`` and no pool appears."""
        with pytest.raises(InvalidName):
            hive.pool(name)
        assert await hive.pools() == []

    @pytest.mark.asyncio
    async def test_bad_worker_names_and_thresholds_are_refused(self, hive: Hive) -> None:
        """[V1] bad worker or pool names raise ``InvalidName``; nothing is registered.

        A bad reap threshold raises ``InvalidArgument``, an unknown status ``ValueError``.
        """
        with pytest.raises(InvalidName):
            await hive.workers.register(worker_id="bad name")
        with pytest.raises(InvalidName):
            await hive.workers.register(worker_id="w1", pools=["ok", "not ok"])
        assert await hive.workers.list() == []
        with pytest.raises(InvalidArgument):
            await hive.workers.reap(threshold=-5)
        with pytest.raises(ValueError):
            await hive.workers.update_status("w1", "sleepy")

    @pytest.mark.asyncio
    async def test_bad_shared_state_input_is_refused(self, hive: Hive) -> None:
        """[V1] a bad namespace, a value that is not JSON or a ttl of 0 is refused and nothing is stored."""
        with pytest.raises(InvalidName):
            hive.shared("bad namespace")
        area = hive.shared("ok")
        with pytest.raises(InvalidItem):
            await area.put("k", {1, 2})
        with pytest.raises(InvalidArgument, match="ttl"):
            await area.put("k", 1, ttl=0)
        assert await area.items() == {}
