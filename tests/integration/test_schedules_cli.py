"""``workhive schedule add|list|rm`` and ``hive.schedules()`` on a real hive (memory, SQLite)."""

from __future__ import annotations

import datetime as dt
import json
import zoneinfo
from pathlib import Path

import pytest

import workhive
from workhive.cli import main
from workhive.errors import ConfigError
from workhive.testing.clock import ManualClock
from workhive.testing.environment import without_workhive_settings

pytest.importorskip("workhive_memory")
pytest.importorskip("workhive_sqlite")

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def at(*args: int) -> float:
    return dt.datetime(*args, tzinfo=BERLIN).timestamp()


class _WithoutSchedules:
    """Every required method of a memory backend, and nothing else (an older third-party backend)."""

    def __init__(self) -> None:
        self._backend = workhive.open("memory://").storage
        self.capabilities = self._backend.capabilities
        for name in workhive.storage.REQUIRED_METHODS:
            setattr(self, name, getattr(self._backend, name))


@pytest.mark.asyncio
async def test_a_storage_without_schedules_is_a_clear_config_error() -> None:
    async with workhive.Hive(_WithoutSchedules()) as hive:  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match="does not keep schedules"):
            await hive.schedules().list()
        with pytest.raises(ConfigError, match="does not keep schedules"):
            await hive.schedules().add("s", "p", every="1m")


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return without_workhive_settings(monkeypatch, tmp_path)


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return int(code or 0), out, err


def test_schedule_commands_add_list_and_remove(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "schedule", "add", "reports", "--cron", "0 3 * * *", "--tz", "Europe/Berlin",
                       "--data", '{"kind": "daily"}', "--name", "nightly")  # fmt: skip
    assert code == 0 and "schedule nightly: reports cron '0 3 * * *' (Europe/Berlin)" in out
    code, out, _ = run(capsys, "schedule", "add", "feeds", "--every", "30s", "--catch-up", "3", "--json")
    added = json.loads(out)
    assert code == 0 and added["every"] == 30.0 and added["misfire"] == "catch-up 3"
    code, out, _ = run(capsys, "schedule", "list", "--json")
    listed = json.loads(out)
    assert [s["name"] for s in listed] == sorted([added["name"], "nightly"])
    nightly = next(s for s in listed if s["name"] == "nightly")
    assert nightly["data"] == {"kind": "daily"} and nightly["tz"] == "Europe/Berlin"
    assert run(capsys, "schedule", "rm", "nightly")[0] == 0
    code, out, _ = run(capsys, "schedule", "list")
    assert "nightly" not in out and added["name"] in out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["--cron", "61 * * * *"], "does not parse"),
        (["--cron", "* * *"], "does not parse"),
        (["--cron", "* * * * *", "--tz", "Nowhere/Special"], "unknown time zone"),
        (["--every", "0"], "too short"),
        (["--every", "30s", "--data", "{nope"], "not valid JSON"),
        (["--every", "30s", "--cron", "* * * * *"], "exactly one"),
    ],
)
def test_bad_schedules_are_one_line_errors_and_store_nothing(
    in_tmp: Path, capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    assert run(capsys, "schedule", "add", "jobs", "--name", "kept", "--every", "1m")[0] == 0
    code, _, err = run(capsys, "schedule", "add", "jobs", "--name", "new", *argv)
    assert code == 2 and err.startswith("error: ") and fragment in err and "Traceback" not in err
    _, out, _ = run(capsys, "schedule", "list", "--json")
    assert [s["name"] for s in json.loads(out)] == ["kept"]


def test_a_bad_pool_name_and_a_duplicate_are_refused(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "schedule", "add", "no spaces", "--every", "1m")
    assert code == 2 and "pool name 'no spaces' is not allowed" in err
    assert run(capsys, "schedule", "add", "jobs", "--every", "1m")[0] == 0
    code, _, err = run(capsys, "schedule", "add", "jobs", "--every", "1m")
    assert code == 2 and "exists already" in err
    code, _, err = run(capsys, "schedule", "rm", "missing")
    assert code == 2 and "no schedule named 'missing'" in err


@pytest.mark.asyncio
async def test_fire_due_on_the_hive_follows_the_manual_clock() -> None:
    clock = ManualClock(at(2026, 6, 1, 11, 59, 30))
    async with workhive.open("memory://", clock=clock) as hive:
        await hive.schedules().add("noon", "lunch", cron="0 12 * * *", tz="Europe/Berlin", data={"eat": True})
        assert await hive.schedules().fire_due() == []
        clock.advance(30.0)
        fired = await hive.schedules().fire_due()
        assert [(f.schedule, f.tick) for f in fired] == [("noon", at(2026, 6, 1, 12, 0))]
        clock.advance(3 * 86400.0)  # three days down: skip to now
        fired = await hive.schedules().fire_due()
        assert [f.tick for f in fired] == [at(2026, 6, 4, 12, 0)]
        items = await hive.pool("lunch").items(workhive.ItemState.PENDING)
        assert [i.data for i in items] == [{"eat": True}, {"eat": True}]
