"""The dashboard in a real headless Chromium (Debian's package, driven by Playwright; nothing downloads a browser).

Absent browser → skip with the reason, except under WORKHIVE_REQUIRE_SERVICES=1 (CI), where it fails.
A screenshot is kept in $WORKHIVE_ARTIFACTS (tox sets it) or the test's temporary directory.
"""

from __future__ import annotations

import http.server
import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workhive.models import ItemState
from workhive.testing.environment import workhive_free_env
from workhive_dashboard import DashboardSettings
from workhive_dashboard.serve import bind

from .conftest import stored_item

CHROMIUM = os.environ.get("WORKHIVE_CHROMIUM", "/usr/bin/chromium")
WAIT_MS = 60_000  # generous: the machine is shared; nothing here measures time


def _require_browser() -> Any:
    missing = None
    if shutil.which(CHROMIUM) is None:
        missing = f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)"
    else:
        try:
            from playwright import sync_api
        except ImportError:
            missing = "playwright is not installed (pip install 'workhive-dashboard[testing]')"
    if missing is not None:
        if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
            pytest.fail(f"{missing}; WORKHIVE_REQUIRE_SERVICES=1 requires it")
        pytest.skip(missing)
    return sync_api


class Server:
    """The dashboard served by uvicorn in a thread of the test process, on a free loopback port."""

    def __init__(self, settings: DashboardSettings) -> None:
        import uvicorn

        from workhive_dashboard.app import create_app

        self.sock = bind("127.0.0.1" if settings.host == "127.0.0.1" else settings.host, 0)
        self.port = self.sock.getsockname()[1]
        config = uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def __enter__(self) -> Server:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()


@pytest.fixture
def browser() -> Iterator[Any]:
    sync_api = _require_browser()
    with sync_api.sync_playwright() as p:
        chromium = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            # The machine's network is closed: no background requests, no component updates.
            args=["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync"],
        )  # fmt: skip
        try:
            yield chromium
        finally:
            chromium.close()


# Runs in every document before its own scripts (injected by the browser tool, so the page's CSP does
# not apply to it): records each CSP violation the document reports.
RECORD_VIOLATIONS = """
window.__cspViolations = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__cspViolations.push(e.violatedDirective + " blocked " + (e.blockedURI || "inline"));
});
"""


def watch(page: Any) -> list[str]:
    """Console errors and CSP violation reports of ``page``, as they come."""
    seen: list[str] = []
    page.add_init_script(RECORD_VIOLATIONS)
    page.on("console", lambda m: seen.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.append(f"page error: {e}"))
    return seen


def violations(page: Any) -> list[str]:
    return list(page.evaluate("() => window.__cspViolations"))


def artifacts(tmp_path: Path) -> Path:
    where = Path(os.environ.get("WORKHIVE_ARTIFACTS") or tmp_path)
    where.mkdir(parents=True, exist_ok=True)
    return where


def test_the_page_shows_the_hive_and_requeues_a_dead_item(
    browser: Any, hive_url: str, populated: dict[str, Any], tmp_path: Path
) -> None:
    from playwright.sync_api import expect

    with Server(DashboardSettings(storage=hive_url, refresh=0.5)) as server:
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(WAIT_MS)
        problems = watch(page)
        loaded = page.goto(server.url)
        assert loaded is not None and "frame-ancestors 'none'" in loaded.headers["content-security-policy"]
        row = page.locator("#pools tbody tr", has_text="jobs")
        expect(row).to_have_count(1)
        cells = row.locator("td")
        expect(cells.nth(1)).to_have_text("4")  # pending
        expect(cells.nth(3)).to_have_text("1")  # claimed
        expect(cells.nth(4)).to_have_text("2")  # done
        expect(cells.nth(5)).to_have_text("1")  # poisoned
        expect(page.locator("#credentials tbody tr", has_text="OPENAI_KEY_2")).to_contain_text("cooling")
        expect(page.locator("#credentials tbody tr", has_text="OPENAI_KEY_2")).to_contain_text("/min")  # learned
        expect(page.locator("#credentials tbody tr", has_text="OPENAI_KEY_3")).to_contain_text("disabled")
        expect(page.locator("#workers tbody tr", has_text="w-busy")).to_contain_text("active")

        row.click()
        dead = page.locator("#dead tbody tr", has_text=populated["dead"])
        expect(dead).to_contain_text("the model refused <b>twice</b>")  # shown as text, never as markup
        dead.locator("td.item-link").click()
        expect(page.locator("#item-id")).to_have_text(populated["dead"])
        expect(page.locator("#item")).to_contain_text("poisoned")
        expect(page.locator("#item ol.steps li")).to_have_text('search (claim 1): {"hits":["<i>a</i>"]}')  # as text
        shot = artifacts(tmp_path) / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")

        dead.locator("button.requeue").click()
        expect(page.locator("#confirm")).to_be_visible()
        page.locator("#confirm-ok").click()
        expect(page.locator("#notice")).to_contain_text("requeued 1 item(s) of jobs")
        expect(cells.nth(1)).to_have_text("5")  # the live update shows it pending again
        assert problems == [] and violations(page) == [], (problems, violations(page))

        # The policy is in force (and the recorder works): an injected inline script is blocked and reported.
        ran = page.evaluate(
            """() => { const s = document.createElement("script");
                       s.textContent = "window.__inlineRan = true;"; document.body.append(s);
                       return window.__inlineRan === true; }"""
        )
        assert ran is False, "an inline script ran: the page has no script-src policy"
        page.wait_for_function("() => window.__cspViolations.length > 0")
        [violation] = violations(page)
        assert violation.startswith("script-src") and violation.endswith("blocked inline"), violation
    assert stored_item(hive_url, populated["dead"]).state is ItemState.PENDING
    assert shot.stat().st_size > 10_000


def test_off_loopback_the_page_needs_the_token(browser: Any, hive_url: str, populated: dict[str, Any]) -> None:
    from playwright.sync_api import expect

    token = "browser-test-token-0123456789"
    with Server(DashboardSettings(storage=hive_url, host="0.0.0.0", token=token)) as server:
        page = browser.new_page()
        page.set_default_timeout(WAIT_MS)
        refused = page.goto(server.url)
        assert refused is not None and refused.status == 401
        expect(page.locator("body")).to_contain_text("needs its token")
        page.goto(f"{server.url}?token={token}")
        assert page.url == server.url, "the token is traded for a cookie and leaves the address bar"
        expect(page.locator("#pools tbody tr", has_text="jobs")).to_have_count(1)
        assert token not in page.content()


class OtherOrigin:
    """Another local origin: a plain HTTP server on its own loopback port, serving one page."""

    def __init__(self, body: str) -> None:
        page = body.encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "text/html; charset=utf-8")
                self.send_header("content-length", str(len(page)))
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, format: str, *args: Any) -> None:  # keep the test output clean
                return None

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> OtherOrigin:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.thread.join(timeout=30)
        self.server.server_close()


def test_another_local_origin_cannot_frame_the_dashboard(
    browser: Any, hive_url: str, populated: dict[str, Any]
) -> None:
    """Clickjacking: a page on another local origin frames the dashboard and steers the user's clicks into it.

    The frame must stay empty (no dashboard, none of its scripts or API calls), so there is nothing
    to click; were it shown, the clicks below requeue the dead item as the report describes.
    """
    from playwright.sync_api import expect

    with Server(DashboardSettings(storage=hive_url, refresh=0.5)) as server:
        attack = (
            f'<!doctype html><p>win a prize</p><iframe name="victim" src="{server.url}" width="1000" height="800" '
            'onload="window.__victimLoaded = true"></iframe>'
        )
        with OtherOrigin(attack) as other:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.set_default_timeout(WAIT_MS)
            requested: list[str] = []
            page.on("request", lambda r: requested.append(r.url))
            page.goto(other.url)
            page.wait_for_function("() => window.__victimLoaded === true")
            victim = page.frame(name="victim")
            assert victim is not None
            frame_url = victim.url
            shown = victim.evaluate("() => document.getElementById('pools') !== null")
            if shown:
                # The attack of the report, through the frame.
                victim.locator("#pools tbody tr", has_text="jobs").click()
                victim.locator("#dead button.requeue").click()
                victim.locator("#confirm-ok").click()
                expect(victim.locator("#notice")).to_contain_text("requeued")
    assert stored_item(hive_url, populated["dead"]).state is ItemState.POISONED, "a framed click requeued it"
    assert not shown, "the dashboard rendered inside another origin's frame"
    assert server.url in requested, "the frame did ask the dashboard for its page"
    assert frame_url != server.url, "the frame holds the dashboard's document"
    assert not [u for u in requested if u.startswith(server.url + "static/") or "/api/" in u], requested


CHART_TASKS = """
import time
import workhive

def handle(ctx):
    time.sleep(0.02)  # a little work, so the fleet runs across several of the dashboard's samples
    n = ctx.data["n"]
    if n % 7 == 0 and ctx.attempt == 1:
        raise RuntimeError("every seventh item fails its first attempt")
    if n % 11 == 0 and ctx.item.releases == 0:
        raise workhive.RateLimited(retry_after=0.001)
    return {"n": n}
"""

# What a chart plots, read from the page (uPlot's data arrays), never from pixels.
READ_CHART = "(id) => { const c = window.workhiveCharts && window.workhiveCharts[id]; return c ? c.data : null; }"


def chart(page: Any, chart_id: str) -> list[list[float | None]]:
    return page.evaluate(READ_CHART, chart_id) or []


def values(data: list[list[float | None]], series: int = 1) -> list[float]:
    return [v for v in (data[series] if len(data) > series else []) if v is not None]


def test_the_charts_move_while_a_fleet_runs(browser: Any, hive_url: str, tmp_path: Path) -> None:
    """A real fleet (`workhive work` with a budgeted key) runs while the page is open: every chart's series moves."""
    import subprocess
    import sys

    from .conftest import run

    pytest.importorskip("workhive_env_credentials", reason="the fleet's key comes from workhive-env-credentials")
    items = 150

    async def push() -> None:
        import workhive

        async with workhive.open(hive_url) as hive:
            await hive.pool("jobs").push_many([{"n": n} for n in range(items)])

    run(push)
    (tmp_path / "chart_tasks.py").write_text(CHART_TASKS)
    with Server(DashboardSettings(storage=hive_url, refresh=0.5)) as server:
        page = browser.new_page(viewport={"width": 1280, "height": 1000})
        page.set_default_timeout(WAIT_MS)
        problems = watch(page)
        page.goto(server.url)
        # A sample of the full pool is charted before the fleet starts, so the depth is seen to fall.
        page.wait_for_function(
            f"() => {{ const c = window.workhiveCharts && window.workhiveCharts['chart-depth'];"
            f" return !!c && c.data[1].includes({items}); }}"
        )
        env = workhive_free_env()
        env.update(CHART_KEY_1="sk-chart-test-0123456789", PYTHONPATH=str(tmp_path))
        fleet = subprocess.Popen(
            [sys.executable, "-m", "workhive", "--storage", hive_url, "work", "jobs", "--handler",
             "chart_tasks:handle", "--processes", "1", "--concurrency", "2", "--backoff", "none",
             "--credentials", "env:CHART_KEY?rpm=3000", "--until-empty", "--progress", "none"],
            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            _, err = fleet.communicate(timeout=300)
        finally:
            if fleet.poll() is None:
                fleet.kill()
                fleet.wait()
        assert fleet.returncode == 0, err
        # The drained pool is sampled too: the depth reaches 0, and the rates show what the fleet did.
        page.wait_for_function(
            "() => { const c = window.workhiveCharts && window.workhiveCharts['chart-depth'];"
            " return !!c && c.data[1][c.data[1].length - 1] === 0; }"
        )
        page.wait_for_function(
            "() => { const c = window.workhiveCharts && window.workhiveCharts['chart-calls'];"
            " return !!c && c.data[1].some((v) => v > 0); }"
        )
        depth, done, failed = chart(page, "chart-depth"), chart(page, "chart-done"), chart(page, "chart-failed")
        calls, limited, budget = chart(page, "chart-calls"), chart(page, "chart-429"), chart(page, "chart-budget")
        shot = artifacts(tmp_path) / "dashboard-charts.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")
        assert items in values(depth) and values(depth)[-1] == 0, depth
        assert max(values(done)) > 0 and max(values(failed)) > 0, (done, failed)
        assert max(values(calls)) > 0 and max(values(limited)) > 0, (calls, limited)
        assert max(values(budget)) > 0, budget  # calls per minute against the key's 3000 rpm
        # Per pool: choosing the pool redraws the charts with its own series (the hive's only pool here).
        page.select_option("#chart-scope", "jobs")
        page.wait_for_function("() => window.workhiveCharts['chart-done'].series[1].label === 'jobs'")
        assert max(values(chart(page, "chart-done"))) > 0
        assert problems == [] and violations(page) == [], (problems, violations(page))
    assert shot.stat().st_size > 10_000
