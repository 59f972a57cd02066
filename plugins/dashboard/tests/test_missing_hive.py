"""Pointed at a hive that does not exist, the dashboard says so, like `workhive status`, and creates nothing."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import workhive
from workhive.cli import main
from workhive.testing.environment import without_workhive_settings

from . import services
from .conftest import run
from .test_api import act, client


def files_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def assert_said_no_hive(c: Any, *fragments: str) -> None:
    """Reading and acting both answer 404 with the store's own "no hive" message."""
    for answer in (
        c.get("/api/overview"),
        c.get("/api/pools/jobs/dead"),
        act(c, "/api/pools/jobs/requeue", {"ids": ["i0000000000000001"]}),
        act(c, "/api/pools/jobs/purge", {"older_than": 0}),
    ):
        assert answer.status_code == 404, answer.text
        message = answer.json()["error"]
        assert "no " in message and "hive" in message and "push to it first" in message, message
        for fragment in fragments:
            assert fragment in message
    page = c.get("/")
    assert page.status_code == 200  # the page opens and shows the message in its banner


def push_one(url: str) -> None:
    async def go() -> None:
        async with workhive.open(url) as hive:
            await hive.pool("jobs").push({"n": 1})

    run(go)


@pytest.mark.parametrize("where", ["missing-dir/hive.db", "hive.db"], ids=["missing-directory", "missing-file"])
def test_sqlite_missing_hive_is_reported_and_nothing_is_created(tmp_path: Path, where: str) -> None:
    url = f"sqlite:///{tmp_path / where}"
    with client(url) as c:
        assert_said_no_hive(c, str(tmp_path / where))
    assert files_under(tmp_path) == [], "no directory, no file, no -wal/-shm"


def test_the_dashboard_recovers_once_the_hive_exists(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'hive.db'}"
    with client(url) as c:
        assert c.get("/api/overview").status_code == 404
        assert files_under(tmp_path) == []
        push_one(url)  # e.g. `workhive push` while the dashboard is running
        answer = c.get("/api/overview")
        assert answer.status_code == 200
        assert [p["pool"] for p in answer.json()["pools"]] == ["jobs"]


@pytest.fixture
def postgres_schema() -> Iterator[tuple[str, str]]:
    base = services.require_postgres()
    schema = services.new_name()
    try:
        yield f"{base}?schema={schema}", schema
    finally:
        services.drop_postgres_schema(schema)  # in case a broken dashboard made it


def test_postgres_missing_schema_is_reported_and_not_created(postgres_schema: tuple[str, str]) -> None:
    url, schema = postgres_schema
    with client(url) as c:
        assert_said_no_hive(c, schema)
    assert not services.postgres_schema_exists(schema)


@pytest.fixture
def redis_prefix() -> Iterator[tuple[str, str]]:
    base = services.require_redis()
    prefix = services.new_name()
    try:
        yield f"{base}?prefix={prefix}", prefix
    finally:
        services.delete_redis_prefix(prefix)


def test_redis_prefix_without_a_hive_is_reported_and_writes_no_key(redis_prefix: tuple[str, str]) -> None:
    url, prefix = redis_prefix
    with client(url) as c:
        assert_said_no_hive(c, "prefix")
    assert services.redis_keys(prefix) == []


# -- `workhive dashboard` itself ------------------------------------------------------------------


class FakeServe:
    """Stands in for uvicorn: records that the CLI got as far as serving, and closes the socket."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def __call__(self, settings: Any, sock: socket.socket, manager: Any = None) -> None:
        self.calls.append(settings.storage)
        sock.close()


@pytest.fixture
def fake_serve(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeServe:
    # no workhive.toml of the caller's; the default store would be here
    without_workhive_settings(monkeypatch, tmp_path, keep=["WORKHIVE_REQUIRE_SERVICES"])
    fake = FakeServe()
    monkeypatch.setattr("workhive_dashboard.serve.serve", fake)
    return fake


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return int(code or 0), out, err


def sqlite_cases(tmp_path: Path) -> list[tuple[list[str], str]]:
    return [
        (["--storage", f"sqlite:///{tmp_path / 'missing-dir' / 'hive.db'}"], "missing-dir"),
        (["--storage", f"sqlite:///{tmp_path / 'hive.db'}"], "hive.db"),
        ([], ".workhive"),  # the default store, in the current directory
    ]


def test_the_command_exits_with_a_message_on_a_missing_sqlite_hive(
    fake_serve: FakeServe, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for storage, named in sqlite_cases(tmp_path):
        code, out, err = run_cli(capsys, *storage, "dashboard", "--port", "0")
        assert code == 2, (storage, out, err)
        [line] = err.strip().splitlines()
        assert line.startswith("error: no workhive hive at") and named in line, line
        assert "push to it first" in line and "Traceback" not in err
    assert fake_serve.calls == [], "it never served"
    assert files_under(tmp_path) == []


@pytest.mark.parametrize("kind", ["postgres", "redis"])
def test_the_command_exits_with_a_message_on_a_missing_server_hive(
    fake_serve: FakeServe, capsys: pytest.CaptureFixture[str], request: pytest.FixtureRequest, kind: str
) -> None:
    url, name = request.getfixturevalue(f"{kind}_schema" if kind == "postgres" else f"{kind}_prefix")
    code, out, err = run_cli(capsys, "--storage", url, "dashboard", "--port", "0")
    assert code == 2, (out, err)
    assert err.startswith("error: no ") and "hive" in err and "push to it first" in err, err
    assert fake_serve.calls == []
    exists: Callable[[str], Any] = (
        services.postgres_schema_exists if kind == "postgres" else services.redis_keys  # type: ignore[assignment]
    )
    assert not exists(name)


def test_the_command_serves_an_existing_hive(
    fake_serve: FakeServe, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'hive.db'}"
    push_one(url)
    code, out, err = run_cli(capsys, "--storage", url, "dashboard", "--port", "0")
    assert (code, err) == (0, ""), err
    assert fake_serve.calls == [url]
    assert "open http://127.0.0.1:" in out


def test_storage_that_does_not_answer_is_a_warning_and_the_dashboard_still_serves(
    fake_serve: FakeServe, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # A hive that is there but cannot be read (here: not a SQLite file) is not "no hive": the page
    # shows why and recovers once storage answers, as before.
    (tmp_path / "hive.db").write_bytes(b"this is not a database, but it is somebody's file")
    url = f"sqlite:///{tmp_path / 'hive.db'}"
    code, _out, err = run_cli(capsys, "--storage", url, "dashboard", "--port", "0")
    assert code == 0, err
    assert err.startswith("warning: ") and "not a SQLite database" in err and "serving anyway" in err, err
    assert fake_serve.calls == [url]
    assert (tmp_path / "hive.db").read_bytes().startswith(b"this is not a database")
