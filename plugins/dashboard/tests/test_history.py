"""The charts' series (``workhive_dashboard.history``), the ``/api/history`` answer, and the committed chart library."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from workhive_dashboard import DashboardSettings
from workhive_dashboard.app import create_app
from workhive_dashboard.history import History, Sample

from .conftest import run

PLUGIN = Path(__file__).resolve().parents[1]


def test_rates_come_from_consecutive_samples_per_pool_and_for_the_hive() -> None:
    history = History(window=3600.0)
    history.add(Sample(100.0, {"a": (0, 0, 0, 10, 5.0)}, {"K": (0, 0, 600.0)}))
    history.add(Sample(102.0, {"a": (4, 1, 1, 6, 7.0), "b": (2, 0, 0, 1, 1.0)}, {"K": (10, 2, 600.0)}))
    history.add(Sample(104.0, {"a": (4, 1, 1, 6, 9.0), "b": (0, 0, 0, 0, None)}, {"K": (10, 2, None)}))
    series = history.series()
    assert series["t"] == [102.0, 104.0]
    assert series["pools"]["a"]["done_per_s"] == [2.0, 0.0]
    assert series["pools"]["a"]["failed_per_s"] == [1.0, 0.0]  # (poisoned 1 + retried 1) over 2 s
    assert series["pools"]["b"]["done_per_s"] == [1.0, 0.0], "a new pool counts from 0; a purge is never negative"
    assert series["pools"]["b"]["depth"] == [1.0, 0.0]
    assert series["hive"]["done_per_s"] == [3.0, 0.0] and series["hive"]["depth"] == [7.0, 6.0]
    assert series["hive"]["oldest_pending_age"] == [7.0, 9.0]
    key = series["credentials"]["K"]
    assert key["calls_per_s"] == [5.0, 0.0] and key["rate_limited_per_s"] == [1.0, 0.0]
    assert key["budget_use"] == [50.0, None]  # 300 calls/min of 600 rpm; no rate known: no use


def test_samples_older_than_the_window_are_dropped() -> None:
    history = History(window=60.0)
    for at in range(0, 200, 10):
        history.add(Sample(float(at), {"a": (at, 0, 0, 0, None)}, {}))
    assert len(history) == 7  # 130 … 190
    assert history.series()["t"][0] == 140.0


def test_the_history_api_charts_a_pushed_and_worked_pool(hive_url: str) -> None:
    import workhive

    async def work() -> None:
        async with workhive.open(hive_url) as hive:
            pool = hive.pool("jobs")
            await pool.push_many([{"n": n} for n in range(5)])
            for _ in range(3):
                item = await pool.claim("w")
                assert item is not None
                await pool.complete(item)

    # Refresh of an hour: the app's own sampler takes its first sample at start, then sleeps.
    app = create_app(DashboardSettings(storage=hive_url, refresh=3600))
    run(work)
    with TestClient(app, base_url="http://127.0.0.1:8177") as client:
        history: History = app.state.history
        for _ in range(600):
            if len(history):
                break
            time.sleep(0.1)
        assert len(history) == 1, "the app samples as it starts"
        clock = iter([10.0, 12.0])
        history._clock = lambda: next(clock)  # two samples two seconds apart, whatever the real clock does

        async def sample() -> None:
            async with workhive.open(hive_url) as hive:
                await history.sample(hive)
                pool = hive.pool("jobs")
                item = await pool.claim("w")
                assert item is not None
                await pool.complete(item)
                await history.sample(hive)

        history._samples.clear()
        run(sample)
        answer = client.get("/api/history")
    assert answer.status_code == 200
    body = answer.json()
    assert body["t"] == [12.0]
    assert body["pools"]["jobs"]["done_per_s"] == [0.5] and body["pools"]["jobs"]["depth"] == [1.0]


def test_the_committed_chart_library_is_the_version_the_lock_pins() -> None:
    lock = json.loads((PLUGIN / "assets" / "package-lock.json").read_text())
    pinned = lock["packages"]["node_modules/uplot"]["version"]
    assert json.loads((PLUGIN / "assets" / "package.json").read_text())["dependencies"]["uplot"] == pinned
    for name in ("uplot.min.js", "uplot.min.css"):
        first = (PLUGIN / "workhive_dashboard" / "static" / name).read_text().splitlines()[0]
        match = re.match(r"/\*! uPlot v(\S+) \(npm package uplot\) \| MIT License \| Copyright", first)
        assert match is not None, f"{name} lacks its licence header: {first[:100]!r}"
        assert match.group(1) == pinned, f"{name} is uPlot {match.group(1)}, package-lock.json pins {pinned}"
    script = (PLUGIN / "workhive_dashboard" / "static" / "uplot.min.js").read_text()
    assert f"(v{pinned})" in script.splitlines()[1], "the library's own banner names another version"


@pytest.mark.parametrize("name", ["uplot.min.js", "uplot.min.css"])
def test_the_chart_library_is_served_by_the_dashboard(hive_url: str, name: str) -> None:
    with TestClient(create_app(DashboardSettings(storage=hive_url)), base_url="http://127.0.0.1:8177") as client:
        answer = client.get(f"/static/{name}")
    assert answer.status_code == 200 and answer.text.startswith("/*! uPlot v")
    assert "default-src 'self'" in answer.headers["content-security-policy"]
