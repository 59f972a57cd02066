"""Every answer the dashboard gives carries its security headers: page, static files, API, refusals, errors."""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import pytest

from workhive_dashboard import DashboardSettings, create_app

from .test_api import CSRF, act, client

REQUIRED = {
    "x-frame-options": "DENY",
    "x-content-type-options": "nosniff",
    "referrer-policy": "no-referrer",
}
# The directives the page must run under; each is checked as a whole directive, not a substring.
CSP_DIRECTIVES = {
    "default-src": "'self'",
    "script-src": "'self'",
    "frame-ancestors": "'none'",
    "base-uri": "'none'",
    "form-action": "'self'",
}


def assert_secured(answer: Any) -> None:
    for name, value in REQUIRED.items():
        assert answer.headers.get(name) == value, f"{answer.request.url}: {name} is {answer.headers.get(name)!r}"
    policy = answer.headers.get("content-security-policy")
    assert policy is not None, f"{answer.request.url} has no Content-Security-Policy"
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";") if d.strip())
    for name, value in CSP_DIRECTIVES.items():
        assert directives.get(name) == value, f"{answer.request.url}: CSP {name} is {directives.get(name)!r}"
    assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
    assert answer.headers.get_list("content-security-policy") == [policy], "exactly one policy"


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("GET", "/", 200),
        ("GET", "/static/dashboard.js", 200),
        ("GET", "/static/dashboard.css", 200),
        ("GET", "/static/nothing.js", 404),
        ("GET", "/api/overview", 200),
        ("GET", "/api/pools/jobs/dead", 200),
        ("GET", "/api/pools/nope/dead", 404),
        ("GET", "/api/pools/jobs/dead?limit=x", 400),
        ("GET", "/no/such/route", 404),
        ("GET", "/api/pools/jobs/requeue", 405),
        ("POST", "/api/pools/jobs/requeue", 403),  # no CSRF header
    ],
)
def test_every_route_carries_the_security_headers(
    hive_url: str, populated: dict[str, Any], method: str, path: str, status: int
) -> None:
    with client(hive_url) as c:
        answer = c.request(method, path)
    assert answer.status_code == status
    assert_secured(answer)


def test_actions_and_the_token_exchange_carry_them_too(hive_url: str, populated: dict[str, Any]) -> None:
    with client(hive_url) as c:
        assert_secured(act(c, "/api/pools/jobs/requeue", {"ids": [populated["dead"]]}))
    token = "a-token-of-sufficient-length"
    with client(hive_url, host="0.0.0.0", token=token, base_url="http://10.1.2.3:8177") as c:
        assert_secured(c.get("/api/overview"))  # 401
        assert_secured(c.get("/"))  # 401 page
        assert_secured(c.get(f"/?token={token}", follow_redirects=False))  # 303 with the cookie


def test_an_unexpected_failure_answers_500_with_the_headers(
    hive_url: str, populated: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug in the dashboard")

    monkeypatch.setattr("workhive_dashboard.app.overview", broken)
    app = create_app(DashboardSettings(storage=hive_url, csrf=CSRF))
    from starlette.testclient import TestClient

    with TestClient(app, base_url="http://127.0.0.1:8177", raise_server_exceptions=False) as c:
        answer = c.get("/api/overview")
    assert answer.status_code == 500
    assert_secured(answer)


def test_the_page_has_nothing_inline_that_the_policy_would_block() -> None:
    """The policy allows no inline script or style: the page must load both from /static/."""
    page = resources.files("workhive_dashboard").joinpath("static/index.html").read_text()
    scripts = re.findall(r"<script\b([^>]*)>(.*?)</script>", page, flags=re.S | re.I)
    assert scripts, "the page loads its script"
    for attributes, body in scripts:
        assert re.search(r'\bsrc="/static/[\w.]+\.js"', attributes) and not body.strip(), attributes
    assert not re.search(r"<style\b", page, flags=re.I), "inline <style>"
    assert not re.search(r"\sstyle=", page, flags=re.I), "inline style attribute"
    assert not re.search(r"\son[a-z]+=", page, flags=re.I), "inline event handler"
    assert "javascript:" not in page.lower()
