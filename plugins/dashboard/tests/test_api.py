"""The dashboard's JSON API and its guards, through Starlette's test client (no browser)."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.testclient import TestClient

from workhive.models import ItemState
from workhive_dashboard import DashboardSettings, create_app

from .conftest import stored_item

CSRF = "csrf-for-the-tests-0123456789"


def client(url: str, **settings: Any) -> TestClient:
    base_url = settings.pop("base_url", "http://127.0.0.1:8177")
    return TestClient(create_app(DashboardSettings(storage=url, csrf=CSRF, **settings)), base_url=base_url)


def act(c: TestClient, path: str, body: Any, **headers: str) -> Any:
    return c.post(path, json=body, headers={"x-workhive-csrf": CSRF, **headers})


def test_overview_shows_pools_workers_and_credentials(hive_url: str, populated: dict[str, Any]) -> None:
    with client(hive_url) as c:
        data = c.get("/api/overview").json()
    [pool] = data["pools"]
    assert (pool["pool"], pool["pending"], pool["claimed"], pool["done"], pool["poisoned"]) == ("jobs", 4, 1, 2, 1)
    assert pool["oldest_pending_age"] >= 0
    health = {w["worker_id"]: w["health"] for w in data["workers"]}
    assert health == {"w-busy": "active", "w-gone": "stopped"}
    creds = {c["name"]: c for c in data["credentials"]}
    assert creds["OPENAI_KEY_2"]["state"] == "cooling" and 0 < creds["OPENAI_KEY_2"]["cooldown_remaining"] <= 300
    assert creds["OPENAI_KEY_3"]["state"] == "disabled" and "learned_rpm" not in creds["OPENAI_KEY_3"]
    assert creds["OPENAI_KEY_2"]["learned_rpm"] >= 120.0  # learned after a 429: 2/s, growing back while calls pass
    assert all("fp" not in c for c in data["credentials"]), "the key's fingerprint is not for display"


def test_the_page_embeds_the_csrf_secret_and_no_password(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}?password=hunter2hunter2"
    with client(url) as c:
        page = c.get("/")
    assert page.status_code == 200 and CSRF in page.text
    assert "hunter2" not in page.text


def test_dead_items_and_item_detail(hive_url: str, populated: dict[str, Any]) -> None:
    with client(hive_url) as c:
        dead = c.get("/api/pools/jobs/dead").json()
        assert dead["total"] == 1 and [i["id"] for i in dead["items"]] == [populated["dead"]]
        assert dead["items"][0]["error"] == "RuntimeError: the model refused <b>twice</b>"
        item = c.get(f"/api/pools/jobs/items/{populated['held']}").json()
        assert item["state"] == "claimed" and item["claimed_by"] == "w-busy" and item["token"] >= 1
        assert item["steps"] == []
        [step] = c.get(f"/api/pools/jobs/items/{populated['dead']}").json()["steps"]
        assert (step["key"], step["value"], step["failed"]) == ("search", '{"hits":["<i>a</i>"]}', False)


@pytest.mark.parametrize(
    "path", ["/api/pools/nope/dead", "/api/pools/jobs/items/i00000000000fffff", "/api/pools/jobs/items/7"]
)
def test_unknown_pool_or_item_is_a_404_with_a_message(hive_url: str, populated: dict[str, Any], path: str) -> None:
    with client(hive_url) as c:
        answer = c.get(path)
    assert answer.status_code == 404
    assert "no pool named 'nope'" in answer.json()["error"] or "no item" in answer.json()["error"]


def test_requeue_moves_a_dead_item_to_pending(hive_url: str, populated: dict[str, Any]) -> None:
    with client(hive_url) as c:
        answer = act(c, "/api/pools/jobs/requeue", {"ids": [populated["dead"]]})
    assert answer.status_code == 200 and answer.json() == {"requeued": 1}
    assert stored_item(hive_url, populated["dead"]).state is ItemState.PENDING


def test_requeue_of_an_item_no_longer_dead_is_a_409_and_changes_nothing(
    hive_url: str, populated: dict[str, Any]
) -> None:
    before = stored_item(hive_url, populated["dead"])
    with client(hive_url) as c:
        answer = act(c, "/api/pools/jobs/requeue", {"ids": [populated["dead"], populated["held"]]})
    assert answer.status_code == 409
    assert f"{populated['held']} is claimed" in answer.json()["error"]
    assert stored_item(hive_url, populated["dead"]) == before  # the dead one was not requeued either


@pytest.mark.parametrize(
    ("headers", "why"),
    [
        ({}, "CSRF"),
        ({"x-workhive-csrf": "wrong"}, "CSRF"),
        ({"x-workhive-csrf": CSRF, "origin": "http://evil.example"}, "another origin"),
    ],
)
def test_actions_without_the_page_secret_or_from_another_origin_are_refused(
    hive_url: str, populated: dict[str, Any], headers: dict[str, str], why: str
) -> None:
    with client(hive_url) as c:
        answer = c.post("/api/pools/jobs/requeue", json={"ids": [populated["dead"]]}, headers=headers)
    assert answer.status_code == 403 and why in answer.json()["error"]
    assert stored_item(hive_url, populated["dead"]).state is ItemState.POISONED


def test_purge_takes_a_number_and_deletes_old_finished_items(hive_url: str, populated: dict[str, Any]) -> None:
    with client(hive_url) as c:
        assert act(c, "/api/pools/jobs/purge", {"older_than": "old"}).status_code == 400
        answer = act(c, "/api/pools/jobs/purge", {"older_than": 0})
        assert answer.status_code == 200 and answer.json() == {"purged": 3}  # 2 done + 1 poisoned
        [pool] = c.get("/api/overview").json()["pools"]
    assert (pool["done"], pool["poisoned"], pool["pending"]) == (0, 0, 4)


def test_off_loopback_every_request_needs_the_token(hive_url: str, populated: dict[str, Any]) -> None:
    token = "a-token-of-sufficient-length"
    with client(hive_url, host="0.0.0.0", token=token, base_url="http://10.1.2.3:8177") as c:
        assert c.get("/api/overview").status_code == 401
        assert c.get("/").status_code == 401
        assert c.get("/api/overview", headers={"authorization": "Bearer wrong-token-wrong-token"}).status_code == 401
        assert c.get("/api/overview", headers={"authorization": f"Bearer {token}"}).status_code == 200
        login = c.get(f"/?token={token}", follow_redirects=False)
        assert login.status_code == 303 and login.headers["location"] == "/"
        assert c.get("/api/overview").status_code == 200  # the cookie now carries it


def test_a_token_is_made_up_when_bound_off_loopback_without_one() -> None:
    settings = DashboardSettings(storage="memory://", host="0.0.0.0").with_token()
    assert settings.token is not None and len(settings.token) >= 16
    assert settings.token not in repr(settings) and settings.csrf not in repr(settings)
    assert DashboardSettings(storage="memory://").with_token().token is None


def test_on_loopback_a_foreign_host_header_is_refused(hive_url: str, populated: dict[str, Any]) -> None:
    # DNS rebinding: a page at evil.example resolving to 127.0.0.1 sends Host: evil.example.
    with client(hive_url, base_url="http://evil.example:8177") as c:
        answer = c.get("/api/overview")
    assert answer.status_code == 403 and "loopback" in answer.json()["error"]


def test_unreachable_storage_is_a_clear_503_without_the_password(tmp_path: Any) -> None:
    url = f"sqlite:///{tmp_path / 'not-a-dir' / 'x.db'}?password=hunter2hunter2"
    (tmp_path / "not-a-dir").write_text("a file where a directory should be")
    with client(url) as c:
        answer = c.get("/api/overview")
    assert answer.status_code == 503
    message = answer.json()["error"]
    assert message.startswith("cannot reach storage") and "hunter2" not in message
