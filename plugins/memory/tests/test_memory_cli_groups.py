"""``workhive push --group`` / ``--group-field`` into a memory store that the test then reads (same process)."""

from __future__ import annotations

import asyncio
import os
from collections import Counter
from pathlib import Path

import pytest

import workhive
from workhive.cli import main
from workhive.testing.environment import without_workhive_settings


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return without_workhive_settings(monkeypatch, tmp_path)


def run(*argv: str) -> int:
    try:
        return int(main(list(argv)) or 0)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1


async def groups_of(url: str, pool: str) -> Counter[str | None]:
    async with workhive.open(url) as hive:
        items = await hive.pool(pool).items("pending", limit=1000)
        return Counter(item.group for item in items)


def test_group_field_and_group_push_each_item_to_its_group(clean_env: Path) -> None:
    url = f"memory://cli-groups-{os.getpid()}-{id(clean_env)}"
    (clean_env / "items.jsonl").write_text(
        '{"tenant": "t-1", "n": 1}\n{"tenant": "t-2", "n": 2}\n{"tenant": "t-1", "n": 3}\n'
    )
    assert run("--storage", url, "push", "jobs", "items.jsonl", "--group-field", "tenant") == 0
    assert asyncio.run(groups_of(url, "jobs")) == {"t-1": 2, "t-2": 1}
    assert run("--storage", url, "push", "other", "items.jsonl", "--group", "bulk") == 0
    assert asyncio.run(groups_of(url, "other")) == {"bulk": 3}
    assert run("--storage", url, "push", "plain", "items.jsonl") == 0
    assert asyncio.run(groups_of(url, "plain")) == {None: 3}


def test_a_bad_group_field_pushes_nothing_and_skip_invalid_pushes_the_rest(
    clean_env: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"memory://cli-groups-bad-{os.getpid()}-{id(clean_env)}"
    (clean_env / "items.jsonl").write_text('{"tenant": "t-1"}\n{"tenant": 5}\n{"tenant": "t-3"}\n')
    assert run("--storage", url, "push", "jobs", "items.jsonl", "--group-field", "tenant") == 2
    assert "line 2" in capsys.readouterr().err
    assert asyncio.run(groups_of(url, "jobs")) == {}
    assert run("--storage", url, "push", "jobs", "items.jsonl", "--group-field", "tenant", "--skip-invalid") == 0
    assert asyncio.run(groups_of(url, "jobs")) == {"t-1": 1, "t-3": 1}
