"""``workhive.runtime.counts``: what worker processes share for the dashboard's charts, summed over processes."""

from __future__ import annotations

import asyncio
from typing import Any

from fake_shared_state import DictStateBackend, FakeClock

from workhive.runtime.counts import COUNTS_NAMESPACE, SharedCounts, read_counts
from workhive.shared_state import SharedState


class FakeHive:
    def __init__(self) -> None:
        self.backend = DictStateBackend(FakeClock())

    def shared(self, namespace: str) -> SharedState:
        return SharedState(self.backend, namespace)  # type: ignore[arg-type]


def test_counts_of_several_processes_add_up_per_pool_and_per_key_name() -> None:
    hive: Any = FakeHive()

    async def go() -> dict[str, Any]:
        one, two = SharedCounts(hive, "jobs"), SharedCounts(hive, "jobs")
        other = SharedCounts(hive, "mail")
        one.retry()
        one.call("KEY_A", rate_limited=False, rpm=120.0)
        one.call("KEY_A", rate_limited=True, rpm=90.0)
        two.call("KEY_A", rate_limited=False, rpm=90.0)
        two.call("KEY_B", rate_limited=False, rpm=None)
        two.retry()
        other.retry()
        for counts in (one, two, other):
            counts.publish_soon()
        await asyncio.sleep(0)  # the writes run as tasks of their own
        for counts in (one, two, other):
            await counts.close()
        return await read_counts(hive)

    summed = asyncio.run(go())
    assert summed["failed"] == {"jobs": 2, "mail": 1}
    assert summed["credentials"]["KEY_A"] == {"calls": 3, "rate_limited": 1, "rpm": 90.0}
    assert summed["credentials"]["KEY_B"] == {"calls": 1, "rate_limited": 0, "rpm": None}


def test_nothing_is_written_until_something_was_counted_and_no_secret_is_stored() -> None:
    hive: Any = FakeHive()

    async def go() -> None:
        counts = SharedCounts(hive, "jobs")
        await counts.close()
        assert hive.backend.rows == {}
        counts.call("OPENAI_API_KEY", rate_limited=False, rpm=500.0)
        await counts.close()

    asyncio.run(go())
    [(namespace, _), ] = hive.backend.rows
    assert namespace == COUNTS_NAMESPACE
    [(value, ttl)] = hive.backend.rows.values()
    assert "OPENAI_API_KEY" in value and ttl is not None
