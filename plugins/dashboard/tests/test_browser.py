"""The dashboard in a real headless Chromium (Debian's package, driven by Playwright; nothing downloads a browser).

Absent browser → skip with the reason, except under WORKHIVE_REQUIRE_SERVICES=1 (CI), where it fails.
A screenshot is kept in $WORKHIVE_ARTIFACTS (tox sets it) or the test's temporary directory.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from workhive.models import ItemState
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
        page.goto(server.url)
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
        shot = artifacts(tmp_path) / "dashboard.png"
        page.screenshot(path=str(shot), full_page=True)
        print(f"screenshot: {shot}")

        dead.locator("button.requeue").click()
        expect(page.locator("#confirm")).to_be_visible()
        page.locator("#confirm-ok").click()
        expect(page.locator("#notice")).to_contain_text("requeued 1 item(s) of jobs")
        expect(cells.nth(1)).to_have_text("5")  # the live update shows it pending again
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
