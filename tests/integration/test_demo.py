"""``workhive demo`` as the README's first command: a real fleet against the local fake LLM API."""

from __future__ import annotations

from pathlib import Path

import pytest

from .cli_helpers import workhive

pytest.importorskip("workhive_sqlite")
pytest.importorskip("workhive_fcntl_locks")
pytest.importorskip("workhive_env_credentials")


def test_demo_reports_nothing_lost_and_the_disabled_key(tmp_path: Path) -> None:
    run = workhive(tmp_path, "demo", "--items", "120", timeout=180)
    assert run.code == 0, run
    assert "done        120 of 120" in run.out
    assert "nothing lost: 120 DONE items in storage = 120 pushed" in run.out
    assert "disabled key: WORKHIVE_DEMO_KEY_3" in run.out
    assert (tmp_path / ".workhive" / "demo" / "hive.db").exists()


def test_demo_json_and_a_clean_rerun(tmp_path: Path) -> None:
    first = workhive(tmp_path, "demo", "--items", "60", "--json", timeout=180)
    assert first.code == 0, first
    again = workhive(tmp_path, "demo", "--items", "60", "--json", timeout=180)
    assert again.code == 0, again
    report = again.json()  # the rerun starts from a wiped hive: 60 done, not 120
    assert report["nothing_lost"] is True
    assert (report["pushed"], report["done"], report["poisoned"], report["unfinished"]) == (60, 60, 0, 0)
    assert set(report["disabled"]) == {"WORKHIVE_DEMO_KEY_3"}
    assert report["server"]["WORKHIVE_DEMO_KEY_3"]["ok"] == 0
    served = sum(stats["ok"] for stats in report["server"].values())
    assert served >= 60  # every item was summarised by the API at least once (at-least-once delivery)
    assert "sk-demo-" not in again.out + again.err  # the keys themselves never reach the output


@pytest.mark.one_python
def test_demo_compares_budgets_known_learned_and_off(tmp_path: Path) -> None:
    run = workhive(tmp_path, "demo", "--items", "40", "--budgets", "compare", "--json", timeout=400)
    assert run.code == 0, run
    reports = run.json()
    assert [r["budgets"] for r in reports] == ["off", "known", "learned"]
    assert all(r["nothing_lost"] for r in reports)
    assert reports[0]["budget_waits"] == 0, "without budgets no call waits for one"
    human = workhive(tmp_path, "demo", "--items", "20", "--budgets", "known", timeout=180)
    assert human.code == 0 and "budgets     known limits (env:…?rpm=)" in human.out, human
