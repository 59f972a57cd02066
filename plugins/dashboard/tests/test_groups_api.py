"""The dashboard's groups table: per pool, the figures of ``workhive group list``, served by its API."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
from starlette.testclient import TestClient

import workhive
from workhive.group_budgets import GroupBudgets
from workhive_dashboard import DashboardSettings, create_app

pytest.importorskip("workhive_memory")


async def _populate(url: str) -> None:
    async with workhive.open(url) as hive:
        agents = hive.pool("agents")
        await agents.push_many([{"n": n} for n in range(4)], group="t-1")
        await agents.push_many([{"n": n} for n in range(2)], group="t-2")
        await agents.set_group_weight("t-2", 3)
        await agents.set_default_group_limit(2)
        await agents.set_group_budget("t-1", tpd=1000)
        await GroupBudgets(hive, "agents").charge("t-1", 250)
        await hive.pool("plain").push({"n": 1})
        assert await agents.claim("w") is not None


def test_the_overview_and_the_groups_endpoint_show_each_groups_figures() -> None:
    url = f"memory://dash-groups-{uuid.uuid4().hex[:8]}"
    asyncio.run(_populate(url))
    app = create_app(DashboardSettings(storage=url, csrf="csrf-for-the-tests-0123456789"))
    with TestClient(app, base_url="http://127.0.0.1:8177") as c:
        pools = {p["pool"]: p for p in c.get("/api/overview").json()["pools"]}
        listed = c.get("/api/pools/agents/groups").json()
        missing = c.get("/api/pools/no%20such/groups")
    assert pools["plain"]["groups"] is None, "a pool without groups has no table"

    def steady(doc: dict[str, Any]) -> list[dict[str, Any]]:  # the spend refills with the real clock between reads
        return [{k: v for k, v in g.items() if k != "spent"} for g in doc["groups"]]

    assert steady(pools["agents"]["groups"]) == steady(listed)
    rows = {g["group"]: g for g in listed["groups"]}
    assert list(rows) == ["t-1", "t-2"] and listed["default_limit"] == 2
    assert sum(g["in_flight"] for g in rows.values()) == 1 and sum(g["ready"] for g in rows.values()) == 5
    assert (rows["t-2"]["weight"], rows["t-2"]["effective_limit"]) == (3.0, 2)
    # The budget refills as the real clock runs (1,000 tokens a day): within a token of the 250 charged.
    assert rows["t-1"]["tpd"] == 1000.0 and rows["t-1"]["spent"] == pytest.approx(250.0, abs=1.0)
    assert missing.status_code == 400
