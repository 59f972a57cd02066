"""Cross-site requests and the token link: what another page can make a browser send, and what it changes."""

from __future__ import annotations

from typing import Any

from workhive_dashboard.security import COOKIE

from .test_api import CSRF, client

TOKEN = "the-right-token-0123456789"
OFF_LOOPBACK = {"host": "0.0.0.0", "token": TOKEN, "base_url": "http://10.1.2.3:8177"}


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
