"""``workhive cancel``, ``--timeout`` and the cancelled column of ``status``, run as a user runs them (SQLite)."""

from __future__ import annotations

from pathlib import Path

import pytest

from .cli_helpers import assert_clean_error, workhive

pytest.importorskip("workhive_sqlite")


def lines(*items: str) -> str:
    return "".join(item + "\n" for item in items)


def push(project: Path, *items: str) -> list[str]:
    run = workhive(project, "push", "jobs", "-", "--json", stdin=lines(*items))
    assert run.code == 0, run
    return run.json()["ids"]


def test_cancel_lists_counts_and_requeues_by_id(tmp_path: Path) -> None:
    first, second, third = push(tmp_path, '{"n": 1}', '{"n": 2}', '{"n": 3}')
    run = workhive(tmp_path, "cancel", "jobs", first, second, "--json")
    assert run.code == 0, run
    assert run.json() == {"pool": "jobs", "cancelled": {first: "pending", second: "pending"}}
    listed = workhive(tmp_path, "cancel", "jobs", "--list", "--json")
    assert [i["id"] for i in listed.json()] == [first, second]
    [pool] = workhive(tmp_path, "status", "jobs", "--json").json()["pools"]
    assert (pool["pending"], pool["cancelled"]) == (1, 2)
    assert "CANCELLED" in workhive(tmp_path, "status", "jobs").out
    assert workhive(tmp_path, "requeue", "jobs", first, "--json").json()["requeued"] == 1
    assert workhive(tmp_path, "requeue", "jobs", "--all", "--json").json()["requeued"] == 0  # dead letters only
    shown = workhive(tmp_path, "show", "jobs", second, "--json").json()
    assert shown["state"] == "cancelled" and shown["progress"] is None
    assert third  # still pending


def test_cancelling_unknown_or_finished_ids_changes_nothing(tmp_path: Path) -> None:
    first, second = push(tmp_path, '{"n": 1}', '{"n": 2}')
    assert workhive(tmp_path, "cancel", "jobs", first).code == 0
    again = workhive(tmp_path, "cancel", "jobs", second, first)
    assert_clean_error(again, f"{first} is already cancelled", "nothing was cancelled")
    unknown = workhive(tmp_path, "cancel", "jobs", second, "i00000000000000ff")
    assert_clean_error(unknown, "i00000000000000ff", "nothing was cancelled")
    [pool] = workhive(tmp_path, "status", "jobs", "--json").json()["pools"]
    assert (pool["pending"], pool["cancelled"]) == (1, 1)  # the second item is still pending
    usage = workhive(tmp_path, "cancel", "jobs")
    assert usage.code != 0 and "give the IDs" in usage.err


@pytest.mark.parametrize("value", ["0", "-1"])
def test_a_timeout_that_is_not_positive_is_refused_before_anything_runs(tmp_path: Path, value: str) -> None:
    push(tmp_path, '{"n": 1}')
    run = workhive(tmp_path, "work", "jobs", "--handler", "json:dumps", "--timeout", value, "--until-empty")
    assert run.code == 2 and "--timeout" in run.err, run
    [pool] = workhive(tmp_path, "status", "jobs", "--json").json()["pools"]
    assert pool["pending"] == 1


def test_push_timeout_is_kept_with_each_item_and_a_bad_one_pushes_nothing(tmp_path: Path) -> None:
    for bad in ("0", "-3", "nan"):
        run = workhive(tmp_path, "push", "jobs", "-", "--timeout", bad, stdin=lines('{"n": 1}'))
        assert_clean_error(run, "--timeout must be a finite number > 0")
    run = workhive(tmp_path, "push", "jobs", "-", "--timeout", "30", "--json", stdin=lines('{"n": 1}'))
    assert run.code == 0, run
    [item_id] = run.json()["ids"]
    shown = workhive(tmp_path, "show", "jobs", item_id, "--json").json()
    assert (shown["timeout"], shown["data"]) == (30.0, {"n": 1})
    [pool] = workhive(tmp_path, "status", "jobs", "--json").json()["pools"]
    assert pool["pending"] == 1  # only the good push stored anything
