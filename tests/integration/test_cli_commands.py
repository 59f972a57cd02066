"""The CLI end to end as a user runs it: subprocesses against the embedded SQLite default."""

from __future__ import annotations

import asyncio
import textwrap
import time
from pathlib import Path

import pytest

from .cli_helpers import assert_clean_error, workhive

pytest.importorskip("workhive_sqlite")

import workhive as wh

TASKS = textwrap.dedent(
    """
    import workhive

    def double(ctx):
        if ctx.data.get("bad"):
            raise workhive.Permanent("this item is marked bad")
        return {"x": ctx.data["n"] * 2}
    """
)


def lines(*items: str) -> str:
    return "".join(item + "\n" for item in items)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "cli_tasks.py").write_text(TASKS)
    return tmp_path


def work(project: Path, pool: str, *extra: str) -> dict:
    run = workhive(
        project,
        "work",
        pool,
        "--handler",
        "cli_tasks:double",
        "--processes",
        "1",
        "--concurrency",
        "2",
        "--until-empty",
        "--progress",
        "none",
        "--json",
        *extra,
    )
    assert run.code == 0, run
    return run.json()


class TestPushWorkStatus:
    def test_push_then_work_until_empty_then_status(self, project: Path) -> None:
        items = lines(*(f'{{"n": {i}}}' for i in range(20)))
        pushed = workhive(project, "push", "numbers", "-", "--json", stdin=items)
        assert pushed.code == 0, pushed
        assert pushed.json()["pushed"] == 20

        report = work(project, "numbers")
        assert report["done"] == 20 and report["poisoned"] == 0 and report["exit_code"] == 0

        status = workhive(project, "status", "--json")
        assert status.code == 0, status
        [pool] = status.json()["pools"]
        assert (pool["pool"], pool["done"], pool["pending"], pool["claimed"]) == ("numbers", 20, 0, 0)

        human = workhive(project, "status", "numbers")
        assert human.code == 0 and "numbers" in human.out and "20" in human.out

    def test_bad_json_line_pushes_nothing(self, project: Path) -> None:
        run = workhive(project, "push", "numbers", "-", stdin=lines('{"n": 1}', '{"n": 2', '{"n": 3}'))
        assert_clean_error(run, "line 2", "nothing was pushed")
        status = workhive(project, "status", "--json")
        assert status.json()["pools"] == []

    def test_skip_invalid_pushes_the_rest_and_reports_the_bad(self, project: Path) -> None:
        (project / "items.jsonl").write_text(lines('{"n": 1}', "oops", '{"n": 3}'))
        run = workhive(project, "push", "numbers", "items.jsonl", "--skip-invalid", "--json")
        assert run.code == 0, run
        assert run.json()["pushed"] == 2
        assert run.json()["skipped"] == [{"line": 2, "error": "not valid JSON: Expecting value (column 1)"}]

    def test_push_options_and_dedup(self, project: Path) -> None:
        items = lines('{"id": "a", "n": 1}', '{"id": "a", "n": 2}', '{"id": "b", "n": 3}')
        run = workhive(
            project, "push", "numbers", "-", "--dedup-key-field", "id", "--delay", "60", "--json", stdin=items
        )
        assert run.code == 0, run
        ids = run.json()["ids"]
        assert ids[0] == ids[1] != ids[2]
        [pool] = workhive(project, "status", "--json").json()["pools"]
        assert (pool["pending"], pool["delayed"]) == (0, 2)


class TestDeadAndRequeue:
    def test_poisoned_items_listed_then_requeued(self, project: Path) -> None:
        items = lines('{"n": 1}', '{"n": 2, "bad": true}', '{"n": 3, "bad": true}')
        assert workhive(project, "push", "mixed", "-", stdin=items).code == 0
        report = work(project, "mixed")
        assert (report["done"], report["poisoned"]) == (1, 2)

        dead = workhive(project, "dead", "mixed", "--json")
        assert dead.code == 0, dead
        assert sorted(d["data"]["n"] for d in dead.json()) == [2, 3]
        assert all("marked bad" in d["error"] for d in dead.json())

        one = dead.json()[0]["id"]
        requeued = workhive(project, "requeue", "mixed", one, "--json")
        assert requeued.code == 0 and requeued.json()["requeued"] == 1
        rest = workhive(project, "requeue", "mixed", "--all", "--json")
        assert rest.json()["requeued"] == 1
        [pool] = workhive(project, "status", "mixed", "--json").json()["pools"]
        assert (pool["pending"], pool["poisoned"]) == (2, 0)

    def test_requeue_of_an_item_that_is_not_poisoned_changes_nothing(self, project: Path) -> None:
        ids = workhive(project, "push", "mixed", "-", "--json", stdin=lines('{"n": 1}')).json()["ids"]
        run = workhive(project, "requeue", "mixed", ids[0])
        assert_clean_error(run, "not poisoned", "nothing was requeued")
        unknown = workhive(project, "requeue", "mixed", "no-such-id")
        assert_clean_error(unknown, "no-such-id")

    @pytest.mark.parametrize("command", [("dead",), ("status",), ("requeue", "--all")])
    def test_unknown_pool_lists_the_known_ones(self, project: Path, command: tuple[str, ...]) -> None:
        assert workhive(project, "push", "real-pool", "-", stdin=lines('{"n": 1}')).code == 0
        run = workhive(project, command[0], "typo-pool", *command[1:])
        assert_clean_error(run, "no pool named 'typo-pool'", "real-pool")


class TestWorkersAndReap:
    def test_workers_after_a_run_are_stopped(self, project: Path) -> None:
        assert workhive(project, "push", "numbers", "-", stdin=lines('{"n": 1}')).code == 0
        work(project, "numbers")
        running = workhive(project, "workers", "--json")
        assert running.code == 0 and running.json() == []
        everyone = workhive(project, "workers", "--all", "--json").json()
        assert everyone and all(w["status"] == "stopped" for w in everyone)
        assert workhive(project, "workers", "--all").code == 0

    def test_reap_releases_a_silent_workers_items(self, project: Path) -> None:
        url = f"sqlite:///{project / '.workhive' / 'hive.db'}"

        async def leave_a_claim() -> str:
            async with wh.open(url) as hive:
                await hive.pool("numbers").push({"n": 1})
                me = await hive.workers.register(pools=["numbers"])
                await hive.pool("numbers").claim(me.worker_id)
                return me.worker_id

        (project / ".workhive").mkdir()
        worker_id = asyncio.run(leave_a_claim())
        time.sleep(0.2)
        stale = workhive(project, "status", "--json", WORKHIVE_REAP_AFTER="0.1").json()
        assert stale["workers"]["stale"] == 1

        run = workhive(project, "reap", "--threshold", "0.1", "--json")
        assert run.code == 0, run
        [reaped] = run.json()["reaped"]
        assert (reaped["worker_id"], reaped["released"]) == (worker_id, 1)
        status = workhive(project, "status", "--json").json()
        assert status["pools"][0]["pending"] == 1
        assert status["workers"]["lost"] == 1
        again = workhive(project, "reap", "--threshold", "0.1")
        assert again.code == 0 and "no worker" in again.out


class TestClearErrors:
    def test_unknown_handler_module(self, project: Path) -> None:
        workhive(project, "push", "numbers", "-", stdin=lines('{"n": 1}'))
        run = workhive(project, "work", "numbers", "--handler", "nowhere_mod:run", "--until-empty")
        assert_clean_error(run, "nowhere_mod")

    def test_unknown_handler_function(self, project: Path) -> None:
        run = workhive(project, "work", "numbers", "--handler", "cli_tasks:triple", "--until-empty")
        assert_clean_error(run, "'triple'", "double")

    def test_unknown_storage_plugin(self, project: Path) -> None:
        run = workhive(project, "--storage", "mongo://localhost/x", "status")
        assert_clean_error(run, "no storage plugin named 'mongo'")

    def test_directory_as_the_database(self, project: Path) -> None:
        (project / "adir").mkdir()
        run = workhive(project, "--storage", f"sqlite:///{project / 'adir'}", "status")
        assert_clean_error(run, "adir")

    def test_storage_from_the_environment(self, project: Path) -> None:
        (project / "adir").mkdir()
        run = workhive(project, "push", "numbers", "-", stdin=lines("{}"), WORKHIVE_STORAGE=f"sqlite:///{project}/adir")
        assert_clean_error(run, "adir")

    def test_bad_pool_name(self, project: Path) -> None:
        run = workhive(project, "push", "no spaces", "-", stdin=lines("{}"))
        assert_clean_error(run, "pool name")

    def test_debug_shows_the_traceback(self, project: Path) -> None:
        run = workhive(project, "--debug", "--storage", "mongo://x", "status")
        assert run.code != 0 and "Traceback" in run.err and "PluginNotFound" in run.err
