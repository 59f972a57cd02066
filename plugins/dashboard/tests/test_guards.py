"""Cross-site requests and the token link: what another page can make a browser send, and what it changes."""

from __future__ import annotations

from typing import Any

import pytest

from workhive.models import ItemState
from workhive_dashboard.security import COOKIE

from .conftest import stored_item
from .test_api import CSRF, act, client

TOKEN = "the-right-token-0123456789"
OFF_LOOPBACK = {"host": "0.0.0.0", "token": TOKEN, "base_url": "http://10.1.2.3:8177"}


@pytest.mark.parametrize(
    "headers",
    [
        # What a browser sends for a fetch from another page: it names the request's site.
        {"sec-fetch-site": "cross-site"},
        # Another port on this host (another local origin): same site, another origin.
        {"sec-fetch-site": "same-site", "origin": "http://127.0.0.1:9999"},
        {"sec-fetch-site": "same-site"},
        # Not from a page at all (typed into the address bar, a bookmark).
        {"sec-fetch-site": "none"},
    ],
)
def test_a_cross_origin_requeue_is_refused_and_the_item_stays_dead(
    hive_url: str, populated: dict[str, Any], headers: dict[str, str]
) -> None:
    # The CSRF secret is right: only where the request comes from is wrong.
    with client(hive_url) as c:
        answer = act(c, "/api/pools/jobs/requeue", {"ids": [populated["dead"]]}, **headers)
        purge = act(c, "/api/pools/jobs/purge", {"older_than": 0}, **headers)
    assert answer.status_code == 403 and "another origin" in answer.json()["error"]
    assert purge.status_code == 403
    assert stored_item(hive_url, populated["dead"]).state is ItemState.POISONED


def test_the_page_s_own_request_is_still_accepted(hive_url: str, populated: dict[str, Any]) -> None:
    # What Chromium sends for the page's fetch: Origin is the dashboard, Sec-Fetch-Site same-origin.
    with client(hive_url) as c:
        answer = act(
            c,
            "/api/pools/jobs/requeue",
            {"ids": [populated["dead"]]},
            origin="http://127.0.0.1:8177",
            **{"sec-fetch-site": "same-origin"},
        )
    assert answer.status_code == 200 and answer.json() == {"requeued": 1}
    assert stored_item(hive_url, populated["dead"]).state is ItemState.PENDING


def test_a_wrong_token_in_the_link_sets_no_cookie(hive_url: str, populated: dict[str, Any]) -> None:
    with client(hive_url, **OFF_LOOPBACK) as c:
        answer = c.get("/?token=WRONG-but-long-enough-to-look-real", follow_redirects=False)
        assert answer.status_code == 401
        assert "set-cookie" not in answer.headers
        assert "is not this dashboard" in answer.text
        assert not c.cookies, "nothing stored in the client"
        assert c.get("/api/overview").status_code == 401


def test_a_wrong_token_link_does_not_log_out_a_valid_session(hive_url: str, populated: dict[str, Any]) -> None:
    with client(hive_url, **OFF_LOOPBACK) as c:
        login = c.get(f"/?token={TOKEN}", follow_redirects=False)
        assert login.status_code == 303 and COOKIE in login.headers["set-cookie"]
        cookie = login.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie
        assert c.get("/api/overview").status_code == 200
        for wrong in ("WRONG-but-long-enough-to-look-real", "", TOKEN + "x", TOKEN[:-1]):
            answer = c.get("/", params={"token": wrong}, follow_redirects=False)
            assert answer.status_code == 401, wrong
            assert "set-cookie" not in answer.headers, f"token {wrong!r} touched the cookie"
        assert c.cookies.get(COOKIE) == TOKEN
        assert c.get("/api/overview").status_code == 200, "the session goes on"
        assert CSRF in c.get("/").text  # and the page still opens with it
