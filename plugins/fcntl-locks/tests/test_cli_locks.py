"""``workhive locks`` against fcntl locks."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from workhive.cli.context import CliContext
from workhive.cli.locks_cmd import locks_cmd
from workhive_fcntl_locks import FcntlLocks


@click.group()
@click.pass_context
def root(ctx: click.Context) -> None:
    ctx.obj = CliContext()


root.add_command(locks_cmd)


def hold(locks: FcntlLocks, name: str, **kw: object) -> object:
    return asyncio.run(locks.acquire(name, ttl=kw.get("ttl"), timeout=0, worker_id=kw.get("worker_id")))  # type: ignore[arg-type]


@pytest.fixture
def lockdir(tmp_path: Path) -> Path:
    return tmp_path / "locks"


def test_list_shows_holders_with_pid_host_worker_and_overdue_flag(lockdir: Path) -> None:
    locks = FcntlLocks(lockdir)
    hold(locks, "repo:acme", ttl=0.001, worker_id="w-1")
    hold(locks, "line\nbreak")
    runner = CliRunner()
    result = runner.invoke(root, ["locks", "--locks", f"fcntl:///{lockdir}"])
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["NAME", "TOKEN", "PID", "HOST", "WORKER", "AGE", "TTL", "STATUS"]
    assert len(lines) == 3  # the newline in a name does not break the table
    acme = next(line for line in lines if line.startswith("repo:acme"))
    assert "w-1" in acme and acme.endswith("OVERDUE")
    assert "line\\nbreak" in result.stdout


def test_list_json_and_the_environment_variable(lockdir: Path) -> None:
    locks = FcntlLocks(lockdir)
    held = hold(locks, "x", ttl=60.0)
    result = CliRunner().invoke(root, ["locks", "list", "--json"], env={"WORKHIVE_LOCKS": f"fcntl:///{lockdir}"})
    assert result.exit_code == 0, result.output
    [entry] = json.loads(result.stdout)
    assert entry["name"] == "x" and entry["token"] == held.token  # type: ignore[attr-defined]
    assert entry["overdue"] is False and entry["ttl"] == 60.0
    assert {"pid", "host", "worker_id", "age", "acquired_at"} <= set(entry)


def test_list_with_nothing_held(lockdir: Path) -> None:
    result = CliRunner().invoke(root, ["locks", "--locks", f"fcntl:///{lockdir}", "list"])
    assert result.exit_code == 0
    assert result.stdout.strip() == "no locks held"


def test_clean_deletes_only_unheld_lock_files(lockdir: Path) -> None:
    locks = FcntlLocks(lockdir)
    hold(locks, "busy")
    asyncio.run(locks.release(hold(locks, "idle")))  # type: ignore[arg-type]
    result = CliRunner().invoke(root, ["locks", "--locks", f"fcntl:///{lockdir}", "clean", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {"cleaned": ["idle"]}
    assert Path(locks.path_for("busy")).exists()


def test_an_unknown_provider_is_an_error_naming_the_installed_ones(lockdir: Path) -> None:
    result = CliRunner().invoke(root, ["locks", "--locks", "nosuch://x"])
    assert result.exit_code != 0
    assert "fcntl" in str(result.exception)
