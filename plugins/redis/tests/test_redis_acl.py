"""ACL users on a private server: the documented rules run every command; a user without them is told the rules.

The rules are ``workhive_redis.failures.ACL_RULES``, which the README shows and the
permission error quotes, so the three cannot drift apart: this test runs the CLI as a
user made with exactly those rules, and checks the README shows them.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis as redis_py
from redis_server import PrivateRedis
from workhive_redis.failures import ACL_RULES, acl_rules

from workhive.testing.environment import workhive_free_env

PREFIX = "acl"
_README = Path(__file__).resolve().parents[1] / "README.md"


def _cli(tmp_path: Path, user: str, port: int, *args: str) -> subprocess.CompletedProcess[str]:
    url = f"redis://{user}@127.0.0.1:{port}/0?prefix={PREFIX}&retry_for=0.5"
    env = workhive_free_env()
    env["PYTHONPATH"] = str(tmp_path)
    return subprocess.run([sys.executable, "-m", "workhive", "--storage", url, *args], capture_output=True,
                          text=True, timeout=300, cwd=tmp_path, env=env)  # fmt: skip


@pytest.fixture
def server(tmp_path: Path) -> PrivateRedis:
    data = tmp_path / "data"
    data.mkdir()
    server = PrivateRedis(data)
    server.start()
    yield server
    server.stop()


def test_the_documented_acl_runs_push_work_status_dead_locks_purge(server: PrivateRedis, tmp_path: Path) -> None:
    admin = redis_py.Redis(port=server.port, decode_responses=True)
    admin.execute_command("ACL", "SETUSER", "app", "on", ">app-pass", *acl_rules(PREFIX).split())
    # Another prefix's keys stay out of reach of this user.
    admin.set("{other}:secret", "x")
    admin.close()
    (tmp_path / "items.jsonl").write_text('{"n": 1}\n{"n": 2}\n')
    (tmp_path / "acl_handler.py").write_text("def handle(ctx):\n    return ctx.item.payload\n")
    for args in (["push", "p", "items.jsonl"], ["work", "p", "--handler", "acl_handler:handle", "--until-empty"],
                 ["status"], ["dead", "p"], ["locks"], ["purge", "p", "--older-than", "0", "--yes"]):  # fmt: skip
        run = _cli(tmp_path, "app:app-pass", server.port, *args)
        assert run.returncode == 0, (args, run.stderr)
    user = redis_py.Redis(port=server.port, username="app", password="app-pass")
    with pytest.raises(redis_py.exceptions.NoPermissionError):
        user.get("{other}:secret")
    user.close()
    assert ACL_RULES.format(prefix="PREFIX") in _README.read_text()


@pytest.mark.parametrize("dropped", ["+time", "+@write"])
def test_a_user_short_of_the_rules_is_told_them(server: PrivateRedis, tmp_path: Path, dropped: str) -> None:
    admin = redis_py.Redis(port=server.port, decode_responses=True)
    admin.execute_command("ACL", "SETUSER", "app", "on", ">app-pass", *acl_rules(PREFIX).split())
    rules = [rule for rule in acl_rules(PREFIX).split() if rule != dropped]
    admin.execute_command("ACL", "SETUSER", "short", "on", ">short-pass", *rules)
    admin.close()
    (tmp_path / "items.jsonl").write_text('{"n": 1}\n')
    assert _cli(tmp_path, "app:app-pass", server.port, "push", "p", "items.jsonl", "--delay", "0.001").returncode == 0
    # status settles due items (a write) before it counts: wait, on the server's own clock, until the
    # delayed item is due, so that the user without +@write meets that write.
    admin = redis_py.Redis(port=server.port)
    due = admin.zrange("{acl/p}:delayed", 0, 0, withscores=True)
    assert due, "the pushed item is not in the delayed set"
    deadline = time.monotonic() + 120
    while sum(x / 10**6 if i else x for i, x in enumerate(admin.time())) <= due[0][1]:
        assert time.monotonic() < deadline, "the server's clock did not pass the item's due time within 120 s"
        time.sleep(0.01)
    admin.close()
    run = _cli(tmp_path, "short:short-pass", server.port, "status")
    assert run.returncode != 0, run.stdout
    assert "ACL rules: " + acl_rules(PREFIX) in run.stderr, run.stderr
    assert "short-pass" not in run.stderr
