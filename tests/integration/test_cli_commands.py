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
        # Either the push never created the hive (status says so), or it holds no pool.
        assert "no workhive hive" in status.err if status.code else status.json()["pools"] == []

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

        refused = workhive(project, "reap", "--threshold", "0.1")
        assert refused.code == 2 and "heartbeat interval" in refused.err, refused
        assert workhive(project, "status", "--json").json()["workers"]["lost"] == 0  # nothing reaped
        run = workhive(project, "reap", "--threshold", "0.1", "--force", "--json")
        assert run.code == 0, run
        [reaped] = run.json()["reaped"]
        assert (reaped["worker_id"], reaped["released"]) == (worker_id, 1)
        status = workhive(project, "status", "--json").json()
        assert status["pools"][0]["pending"] == 1
        assert status["workers"]["lost"] == 1
        again = workhive(project, "reap", "--threshold", "0.1", "--force")
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


class TestSeeingWhatHappens:
    def test_show_prints_one_item_and_its_json(self, project: Path) -> None:
        items = lines('{"n": 1}', '{"n": 2, "bad": true}')
        ids = workhive(project, "push", "mixed", "-", "--json", stdin=items).json()["ids"]
        work(project, "mixed")
        done = workhive(project, "show", "mixed", ids[0], "--json")
        assert done.code == 0, done
        data = done.json()
        assert (data["state"], data["data"], data["result"], data["attempts"]) == ("done", {"n": 1}, {"x": 2}, 1)
        assert data["token"] >= 1 and data["finished_at"] is not None and data["receipt"].startswith(ids[0])
        human = workhive(project, "show", "mixed", ids[1])
        assert human.code == 0, human
        assert "poisoned" in human.out and "this item is marked bad" in human.out
        missing = workhive(project, "show", "mixed", "i00000000000000ff")
        assert_clean_error(missing, "no item")

    def test_purge_deletes_finished_items_only_when_confirmed(self, project: Path) -> None:
        assert workhive(project, "push", "old", "-", stdin=lines('{"n": 1}', '{"n": 2}')).code == 0
        work(project, "old")
        assert workhive(project, "push", "old", "-", stdin=lines('{"n": 3}')).code == 0
        unconfirmed = workhive(project, "purge", "old", "--older-than", "0")
        assert unconfirmed.code != 0 and "--yes" in unconfirmed.err
        bad = workhive(project, "purge", "old", "--older-than", "soon", "--yes")
        assert bad.code == 2 and "not a duration" in bad.err
        kept = workhive(project, "purge", "old", "--older-than", "7d", "--yes", "--json")
        assert kept.code == 0 and kept.json()["deleted"] == 0
        run = workhive(project, "purge", "old", "--older-than", "0", "--yes", "--json")
        assert run.code == 0 and run.json()["deleted"] == 2, run
        [pool] = workhive(project, "status", "old", "--json").json()["pools"]
        assert (pool["done"], pool["pending"]) == (0, 1)

    @pytest.mark.parametrize(
        "command",
        [("status",), ("workers",), ("dead", "p"), ("show", "p", "i0000000000000001"), ("requeue", "p", "--all")],
    )
    def test_commands_that_read_create_nothing_and_say_there_is_no_hive(self, tmp_path: Path, command) -> None:
        run = workhive(tmp_path, *command)
        assert_clean_error(run, "no workhive hive")
        assert list(tmp_path.iterdir()) == []
        elsewhere = workhive(tmp_path, "--storage", "sqlite:///no-such-dir/x.db", *command)
        assert_clean_error(elsewhere, "no-such-dir")
        assert list(tmp_path.iterdir()) == []

    def test_verbose_work_shows_the_handlers_log_lines_from_worker_processes(self, project: Path) -> None:
        (project / "chatty.py").write_text(
            "def handle(ctx):\n    ctx.logger.info('handling item %s', ctx.data['n'])\n    return None\n"
        )
        assert workhive(project, "push", "talk", "-", stdin=lines('{"n": 41}')).code == 0
        quiet = workhive(project, "work", "talk", "--handler", "chatty:handle", "--until-empty", "--processes", "1")
        assert quiet.code == 0 and "handling item" not in quiet.err
        assert workhive(project, "push", "talk", "-", stdin=lines('{"n": 42}')).code == 0
        loud = workhive(
            project, "work", "talk", "--handler", "chatty:handle", "--until-empty", "--processes", "1", "-v"
        )
        assert loud.code == 0, loud
        assert "handling item 42" in loud.err


class TestChecksBeforeWork:
    def test_grace_zero_is_accepted(self, project: Path) -> None:
        assert workhive(project, "push", "numbers", "-", stdin=lines('{"n": 1}')).code == 0
        assert work(project, "numbers", "--grace", "0")["done"] == 1

    def test_a_pool_that_never_had_an_item(self, project: Path) -> None:
        assert workhive(project, "push", "numbers", "-", stdin=lines('{"n": 1}')).code == 0
        run = workhive(project, "work", "nubmers", "--handler", "cli_tasks:double", "--until-empty")
        assert_clean_error(run, "'nubmers' has never had an item", "numbers")
        assert [p["pool"] for p in workhive(project, "status", "--json").json()["pools"]] == ["numbers"]

    def test_a_huge_fleet_is_refused_before_anything_starts(self, project: Path) -> None:
        assert workhive(project, "push", "numbers", "-", stdin=lines('{"n": 1}')).code == 0
        for flag, value in (("--processes", "100000"), ("--concurrency", "1000000")):
            run = workhive(project, "work", "numbers", "--handler", "cli_tasks:double", flag, value)
            assert_clean_error(run, "over the limit", "--allow-large-fleet")
        assert workhive(project, "workers", "--all", "--json").json() == []

    def test_a_handler_with_the_wrong_arity_claims_nothing(self, project: Path) -> None:
        (project / "arity.py").write_text("def handle(ctx, extra):\n    return None\n")
        assert workhive(project, "push", "numbers", "-", stdin=lines('{"n": 1}')).code == 0
        run = workhive(project, "work", "numbers", "--handler", "arity:handle", "--until-empty")
        assert_clean_error(run, "one argument")
        [pool] = workhive(project, "status", "--json").json()["pools"]
        assert (pool["pending"], pool["poisoned"]) == (1, 0)

    def test_an_unusable_lock_provider_is_refused_before_any_item_is_claimed(self, project: Path) -> None:
        assert workhive(project, "push", "numbers", "-", stdin=lines('{"n": 1}')).code == 0
        run = workhive(project, "work", "numbers", "--handler", "cli_tasks:double", "--locks", "bogus://x")
        assert_clean_error(run, "bogus")
        [pool] = workhive(project, "status", "--json").json()["pools"]
        assert (pool["pending"], pool["poisoned"]) == (1, 0)

    def test_locks_pointing_at_a_file(self, project: Path) -> None:
        (project / "afile").write_text("not a directory")
        run = workhive(project, "locks", "--locks", f"fcntl:///{project / 'afile'}")
        assert_clean_error(run, "is a file, not a directory")


class TestDeadLocalWorkers:
    def test_a_worker_whose_process_is_gone_shows_dead_and_is_reaped_at_once(self, project: Path) -> None:
        import subprocess
        import sys

        url = f"sqlite:///{project / '.workhive' / 'hive.db'}"
        gone = subprocess.Popen([sys.executable, "-c", "pass"])
        gone.wait()  # a real PID of this host, now without a process

        async def leave_a_claim() -> str:
            async with wh.open(url) as hive:
                await hive.pool("numbers").push({"n": 1})
                me = await hive.workers.register(pools=["numbers"], pid=gone.pid)
                await hive.pool("numbers").claim(me.worker_id)
                return me.worker_id

        (project / ".workhive").mkdir()
        worker_id = asyncio.run(leave_a_claim())
        status = workhive(project, "status", "--json").json()  # reap_after is 60s: no heartbeat is late
        assert status["workers"]["dead"] == 1 and status["workers"]["active"] == 0, status
        [listed] = workhive(project, "workers", "--json").json()
        assert listed["health"] == "dead"
        run = workhive(project, "reap", "--json")
        assert run.code == 0, run
        [reaped] = run.json()["reaped"]
        assert (reaped["worker_id"], reaped["released"]) == (worker_id, 1)
        status = workhive(project, "status", "--json").json()
        assert status["pools"][0]["pending"] == 1 and status["workers"]["lost"] == 1


STEP_TASKS = textwrap.dedent(
    """
    import workhive

    def stepper(ctx):
        found = ctx.step("fetch", lambda: {"n": ctx.data["n"], "text": "é" * 300})
        if ctx.data.get("bad"):
            ctx.step("check", _refuse)
        return found["n"]

    def _refuse():
        raise workhive.Permanent("marked bad")
    """
)


class TestDurableSteps:
    def test_show_lists_the_steps_requeue_keeps_them_unless_fresh_and_purge_removes_them(self, project: Path) -> None:
        (project / "step_tasks.py").write_text(STEP_TASKS)
        ids = workhive(
            project, "push", "agents", "-", "--json", stdin=lines('{"n": 1}', '{"n": 2, "bad": true}')
        ).json()["ids"]
        report = work(project, "agents", "--handler", "step_tasks:stepper")
        assert (report["done"], report["poisoned"]) == (1, 1)
        bad = workhive(project, "show", "agents", ids[1], "--json").json()
        assert [(s["key"], s["failed"]) for s in bad["steps"]] == [("fetch", False), ("check", True)]
        assert bad["steps"][0]["value"]["n"] == 2 and "marked bad" in bad["steps"][1]["value"]
        human = workhive(project, "show", "agents", ids[1])
        assert human.code == 0, human
        assert "steps:      2" in human.out and "  fetch (claim 1, " in human.out
        assert "  check (claim 1, " in human.out and "failed permanently: " in human.out
        assert "…" in human.out  # a long result is cut in the text view, whole in --json
        assert workhive(project, "requeue", "agents", ids[1], "--json").json()["requeued"] == 1
        assert len(workhive(project, "show", "agents", ids[1], "--json").json()["steps"]) == 2
        work(project, "agents", "--handler", "step_tasks:stepper")  # replays the failure: poisoned again
        assert workhive(project, "requeue", "agents", "--all", "--fresh", "--json").json()["requeued"] == 1
        assert workhive(project, "show", "agents", ids[1], "--json").json()["steps"] == []
        assert workhive(project, "purge", "agents", "--older-than", "0", "--yes", "--json").json()["deleted"] == 1

        async def steps_left() -> list:
            async with wh.open(f"sqlite:///{project}/.workhive/hive.db", create=False) as hive:
                return await hive.storage.step_list("agents", ids[0])  # type: ignore[attr-defined]

        assert asyncio.run(steps_left()) == []
