"""``workhive group set|default-limit|pool-limit|budget|list`` and the group lines of ``workhive status``.

In-process (``workhive.cli.main``) on a named memory hive, which every command of
the test opens again by its URL.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

import workhive
from workhive.cli import main
from workhive.group_budgets import GroupBudgets
from workhive.testing.environment import without_workhive_settings

pytest.importorskip("workhive_memory")


@pytest.fixture
def url(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    without_workhive_settings(monkeypatch, tmp_path)
    name = f"memory://groups-cli-{uuid.uuid4().hex[:8]}"

    async def make() -> None:
        async with workhive.open(name) as hive:
            await hive.pool("agents").push_many([{"n": n} for n in range(3)], group="t-1")
            await hive.pool("agents").push_many([{"n": n} for n in range(2)])

    asyncio.run(make())
    yield name


def run(capsys: pytest.CaptureFixture[str], url: str, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(["--storage", url, *argv])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return int(code or 0), out, err


def listing(capsys: pytest.CaptureFixture[str], url: str) -> dict[str, Any]:
    code, out, err = run(capsys, url, "group", "list", "agents", "--json")
    assert code == 0, err
    doc: dict[str, Any] = json.loads(out)
    return doc


def test_settings_made_on_the_command_line_are_listed(capsys: pytest.CaptureFixture[str], url: str) -> None:
    for argv in (
        ("group", "set", "agents", "t-1", "--weight", "2.5", "--limit", "3"),
        ("group", "set", "agents", "t-later", "--limit", "1"),  # before the group has any item
        ("group", "default-limit", "agents", "2"),
        ("group", "pool-limit", "agents", "8"),
        ("group", "budget", "agents", "t-1", "--tpd", "1e6"),
    ):
        code, out, err = run(capsys, url, *argv)
        assert code == 0 and not err, (argv, err)
    doc = listing(capsys, url)
    assert (doc["pool_limit"], doc["default_limit"]) == (8, 2)
    rows = {g["group"]: g for g in doc["groups"]}
    assert list(rows) == [None, "t-1", "t-later"]
    assert rows[None]["ready"] == 2 and rows[None]["effective_limit"] is None, "ungrouped: only the pool limit"
    one = rows["t-1"]
    assert (one["weight"], one["limit"], one["ready"], one["in_flight"], one["tpd"], one["spent"]) == (
        2.5, 3, 3, 0, 1e6, 0.0,
    )  # fmt: skip
    assert (rows["t-later"]["limit"], rows["t-later"]["ready"]) == (1, 0)

    code, out, _ = run(capsys, url, "group", "list", "agents")
    assert code == 0 and "t-1" in out and "0/1,000,000" in out and "2 (default)" not in out
    code, _, _ = run(capsys, url, "group", "set", "agents", "t-1", "--limit", "none")
    code, out, _ = run(capsys, url, "group", "list", "agents")
    assert "2 (default)" in out, "without its own limit a named group has the default"


def test_bad_input_exits_non_zero_saying_what_was_wrong_and_changes_nothing(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    run(capsys, url, "group", "budget", "agents", "t-1", "--tpd", "500")
    before = listing(capsys, url)
    for argv, said in (
        (("group", "budget", "agents", "t-1", "--tpd", "-1"), "tpd (tokens per day) must be a finite number > 0"),
        (("group", "budget", "agents", "t-1", "--tpd", "0"), "tpd (tokens per day) must be a finite number > 0"),
        (("group", "budget", "agents", "t-1", "--tpd", "nan"), "tpd (tokens per day) must be a finite number > 0"),
        (("group", "budget", "agents", "t-1", "--tpd", "lots"), "not a number of tokens per day"),
        (("group", "set", "agents", "t-1", "--weight", "2", "--limit", "0"), "integer from 1"),
        (("group", "set", "agents", "t-1", "--weight", "0"), "weight must be a finite number > 0"),
        (("group", "set", "agents", "t-1"), "give --weight and/or --limit"),
        (("group", "set", "agents", "bad name", "--weight", "2"), "group"),
        (("group", "default-limit", "agents", "0"), "integer from 1"),
        (("group", "pool-limit", "agents", "many"), "not a whole number"),
    ):
        code, _, err = run(capsys, url, *argv)
        assert code == 2 and said in err and "Traceback" not in err, (argv, code, err)
    assert listing(capsys, url) == before


def test_status_shows_a_line_per_group_only_for_pools_that_use_groups(
    capsys: pytest.CaptureFixture[str], url: str
) -> None:
    async def more() -> None:
        async with workhive.open(url) as hive:
            await hive.pool("plain").push({"n": 1})
            await hive.pool("agents").set_group_budget("t-1", tpd=1000)
            await GroupBudgets(hive, "agents").charge("t-1", 1500)
            await hive.pool("agents").claim("w")

    asyncio.run(more())
    code, out, err = run(capsys, url, "status")
    assert code == 0, err
    lines = [line for line in out.splitlines() if ": group " in line]
    assert len(lines) == 2 and all(line.startswith("agents: group ") for line in lines), out
    [tenant] = [line for line in lines if "t-1" in line]
    assert "ready" in tenant and "paused" in tenant and "budget 1,500/1,000 tokens/day spent" in tenant
    code, out, _ = run(capsys, url, "status", "--json")
    pools = {p["pool"]: p for p in json.loads(out)["pools"]}
    assert "groups" not in pools["plain"]
    t1 = next(g for g in pools["agents"]["groups"]["groups"] if g["group"] == "t-1")
    assert t1["tpd"] == 1000 and t1["spent"] == pytest.approx(1500, abs=1.0) and t1["paused_for"] > 0  # refilling
