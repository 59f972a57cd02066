"""Stored and handler text never steers a terminal: human output escapes control characters, ``--json`` is exact.

A handler raises, logs and returns text holding ``ESC [2J`` (clear the screen), OSC 52 (set the
clipboard) and a C1 CSI. ``work -v`` (its log lines, progress and report), ``dead``, ``show`` and
``workers`` must show them as visible escapes, piped (as here) and on a terminal (a pty), while
``--json`` gives the exact text back.
"""

from __future__ import annotations

import asyncio
import json
import os
import pty
import select
import subprocess
from pathlib import Path

import attrs
import pytest

from .cli_helpers import COMMAND, Run, clean_env, workhive
from .conftest import HERE
from .handlers import C1_CSI, CLEAR, CLIPBOARD

pytest.importorskip("workhive_sqlite")

import workhive as wh

#: how each sequence must look in human output
SHOWN = {CLEAR: "\\x1b[2J", CLIPBOARD: "\\x1b]52;c;ZXZpbA==\\x07", C1_CSI: "\\x9b1m"}
BOOM = f"boom {CLEAR} {CLIPBOARD} {C1_CSI}"
BOOM_SHOWN = f"boom {SHOWN[CLEAR]} {SHOWN[CLIPBOARD]} {SHOWN[C1_CSI]}"
CAPPED = " (poisoned after 1 attempts: the fleet's max_attempts)"


def _assert_inert(where: str, text: str) -> None:
    """No character a terminal acts on, other than newlines (and a live line's carriage return)."""
    for char in ("\x1b", "\x07", "\x9b"):
        assert char not in text, f"{char!r} reached {where}: {text!r}"


@attrs.frozen
class Ran:
    """A sqlite hive where ``terminal_mess`` failed one item and completed another, and that ``work -v`` run."""

    cwd: Path
    storage: str
    failed: str
    done: str
    work: Run


# One fleet run for the module: the tests that read it (work's output, then dead and show, piped and on
# a terminal) only read the hive, so a run per test would repeat the same fleet three times.
@pytest.fixture(scope="module")
def ran(tmp_path_factory: pytest.TempPathFactory) -> Ran:
    tmp_path = tmp_path_factory.mktemp("terminal")
    storage = f"sqlite:///{tmp_path / 'hive.db'}"
    pushed = workhive(
        tmp_path, "--storage", storage, "push", "jobs", "-", "--json", stdin='{"do": "boom"}\n{"do": "result"}\n'
    )
    assert pushed.code == 0, pushed
    run = workhive(
        tmp_path, "--storage", storage, "work", "jobs", "--handler", "handlers:terminal_mess",
        "--processes", "1", "--max-attempts", "1", "--until-empty", "--progress", "log", "-v",
        PYTHONPATH=str(HERE),
    )  # fmt: skip
    assert run.code == 0, run
    failed, done = pushed.json()["ids"]
    return Ran(tmp_path, storage, failed, done, run)


def test_work_verbose_escapes_log_lines_progress_and_report(ran: Ran) -> None:
    run = ran.work
    _assert_inert("work's stdout (the report)", run.out)
    _assert_inert("work -v's stderr (log lines and progress)", run.err)
    # The paths were taken: the worker's log line of the failure, the handler's own logger, the progress line.
    assert f"failed: RuntimeError: {BOOM_SHOWN}" in run.err, run.err
    assert f"the API said {SHOWN[CLIPBOARD]}" in run.err, run.err
    assert f"last error {ran.failed}: RuntimeError: {BOOM_SHOWN}" in run.err, run.err


def test_dead_and_show_escape_stored_text_and_json_is_exact(ran: Ran) -> None:
    tmp_path, storage, failed, done = ran.cwd, ran.storage, ran.failed, ran.done
    dead = workhive(tmp_path, "--storage", storage, "dead", "jobs")
    assert dead.code == 0, dead
    _assert_inert("dead", dead.out)
    assert f"RuntimeError: {BOOM_SHOWN}" in dead.out, dead.out
    [entry] = workhive(tmp_path, "--storage", storage, "dead", "jobs", "--json").json()
    assert entry["error"] == f"RuntimeError: {BOOM}{CAPPED}"

    for item_id, shown in ((failed, f"error:      RuntimeError: {BOOM_SHOWN}"), (done, "result:")):
        human = workhive(tmp_path, "--storage", storage, "show", "jobs", item_id)
        assert human.code == 0, human
        _assert_inert("show", human.out)
        assert shown in human.out, human.out
    # The result is shown as JSON, which escapes C0 itself but not C1: the helper does.
    assert "\\u001b[2J" in human.out and SHOWN[C1_CSI] in human.out, human.out
    exact = workhive(tmp_path, "--storage", storage, "show", "jobs", done, "--json").json()
    assert exact["result"] == {"note": f"result {CLEAR} {CLIPBOARD} {C1_CSI}"}
    assert workhive(tmp_path, "--storage", storage, "show", "jobs", failed, "--json").json()["error"] == entry["error"]


def _on_a_terminal(cwd: Path, *args: str) -> str:
    """Run ``workhive ARGS`` with its stdout on a pseudo-terminal; what the terminal received."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*COMMAND, *args], cwd=cwd, stdin=subprocess.DEVNULL, stdout=follower, stderr=subprocess.PIPE, env=clean_env()
    )
    os.close(follower)
    received = b""
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 120)
            assert ready, f"no output from {args} on the terminal; so far {received!r}"
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the process closed the terminal (exited)
                break
            if not chunk:
                break
            received += chunk
    finally:
        os.close(leader)
        assert proc.wait(timeout=120) == 0, proc.stderr.read() if proc.stderr else ""
        if proc.stderr:
            proc.stderr.close()
    return received.decode()


def test_on_a_terminal_show_and_dead_escape_too(ran: Ran) -> None:
    tmp_path, storage, failed, done = ran.cwd, ran.storage, ran.failed, ran.done
    result_shown = "\\u001b[2J \\u001b]52;c;ZXZpbA==\\u0007 \\x9b1m"  # JSON's escapes, and the helper's for C1
    for args, shown in (
        (("show", "jobs", failed), BOOM_SHOWN),
        (("show", "jobs", done), result_shown),
        (("dead", "jobs"), BOOM_SHOWN),
    ):
        seen = _on_a_terminal(tmp_path, "--storage", storage, *args)
        _assert_inert(f"{args[0]} on a terminal", seen)
        assert shown in seen, seen


def test_workers_escapes_a_registered_host_and_json_is_exact(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'hive.db'}"
    host = f"evil{CLEAR}{CLIPBOARD}"

    async def register() -> None:
        async with wh.open(storage) as hive:
            await hive.workers.register(worker_id="w-evil", host=host, pid=1, pools=("jobs",))

    asyncio.run(register())
    human = workhive(tmp_path, "--storage", storage, "workers")
    assert human.code == 0, human
    _assert_inert("workers", human.out)
    assert f"evil{SHOWN[CLEAR]}{SHOWN[CLIPBOARD]}" in human.out, human.out
    [record] = json.loads(workhive(tmp_path, "--storage", storage, "workers", "--json").out)
    assert record["host"] == host
