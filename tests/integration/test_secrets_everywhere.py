"""Canary keys through every path a fleet has, grepped in every output stream and in the database files.

The handler quotes its key back as an API would: in a 401 reason (credential disabled, reported by
the supervisor), a permanent failure and a retried exception (stored item errors), a rate-limit
message (the "rate limited N times" error), and its own logger. None of it may show the key.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .cli_helpers import workhive
from .conftest import HERE

pytest.importorskip("workhive_sqlite")

CANARY_1 = "sk-canary-1111-LEAKED-aaaaaaaaaaaaaaaa"
CANARY_2 = "sk-canary-2222-LEAKED-bbbbbbbbbbbbbbbb"


def _push(tmp: Path, env: dict[str, str], storage: str) -> None:
    items = [
        {"do": "auth", "bad": "CANARY_1"},
        {"do": "auth", "bad": "CANARY_1"},
        {"do": "permanent"},
        {"do": "boom"},
        {"do": "rate_limit"},
        {"do": "ok"},
    ]
    run = workhive(
        tmp, "--storage", storage, "push", "jobs", "-", stdin="".join(json.dumps(i) + "\n" for i in items), **env
    )
    assert run.code == 0, run


def _assert_clean(where: str, text: str | bytes) -> None:
    raw = text.encode() if isinstance(text, str) else text
    for canary in (CANARY_1, CANARY_2):
        assert canary.encode() not in raw, f"{canary} leaked in {where}"
        assert b"LEAKED" not in raw, f"part of a canary key leaked in {where}"


@pytest.mark.one_python
def test_no_canary_key_in_any_output_stream_or_the_database(tmp_path: Path) -> None:
    env = {
        "PYTHONPATH": str(HERE),
        "CANARY_1": CANARY_1,
        "CANARY_2": CANARY_2,
        "WORKHIVE_MAX_RATE_LIMIT_RETRIES": "1",
    }
    plain, as_json = "sqlite:///plain/hive.db", "sqlite:///json/hive.db"
    _push(tmp_path, env, plain)
    _push(tmp_path, env, as_json)
    common = [
        "work",
        "jobs",
        "--handler",
        "handlers:leaky",
        "--credentials",
        "env:CANARY",
        "--processes",
        "1",
        "--concurrency",
        "2",
        "--max-attempts",
        "2",
        "--until-empty",
        "--progress",
        "log",
        "--log-level",
        "DEBUG",
    ]
    run = workhive(tmp_path, "--storage", plain, *common, **env)
    assert run.code == 0, run
    # The paths were taken: a credential was disabled and items failed with the API's text.
    assert "credential disabled: CANARY_1" in run.out, run.out
    assert "**********" in run.out + run.err
    _assert_clean("work's stdout", run.out)
    _assert_clean("work's stderr (progress, supervisor and worker logs)", run.err)

    run_json = workhive(tmp_path, "--storage", as_json, *common, "--json", **env)
    assert run_json.code == 0, run_json
    assert "CANARY_1" in run_json.json()["disabled_credentials"]
    _assert_clean("work --json", run_json.out)
    _assert_clean("work --json's stderr", run_json.err)

    for storage in (plain, as_json):
        dead = workhive(tmp_path, "--storage", storage, "dead", "jobs", "--json", **env)
        assert dead.code == 0, dead
        errors = [item["error"] for item in dead.json()]
        assert any("the API refused" in e for e in errors) and any("HTTP 500" in e for e in errors), errors
        assert any("rate limited" in e for e in errors), errors
        _assert_clean("dead --json", dead.out)
        for item in dead.json():
            for extra in ((), ("--json",)):
                shown = workhive(tmp_path, "--storage", storage, "show", "jobs", item["id"], *extra, **env)
                assert shown.code == 0, shown
                _assert_clean("show", shown.out)
        _assert_clean("status", workhive(tmp_path, "--storage", storage, "status", "--json", **env).out)
    files = list(tmp_path.glob("*/hive.db*"))
    assert len(files) >= 2
    for path in files:
        _assert_clean(str(path), path.read_bytes())


#: URL-encoding and JSON escaping change + / = " and é: the encoded forms differ from the key as is
ENCODED_CANARY = 'sk-enc+4444/LEAKED=dd"é'


# The encoded forms are scrubbed by the core, unit-tested on every Python (tests/core/test_secrets.py);
# this is the whole path through a fleet and the CLI, once in the matrix.
@pytest.mark.one_python
def test_a_key_in_results_or_encoded_in_errors_is_stored_and_shown_scrubbed(tmp_path: Path) -> None:
    env = {"PYTHONPATH": str(HERE), "ENC_KEY": ENCODED_CANARY}
    storage = "sqlite:///enc/hive.db"
    items = [{"do": "result"}, {"do": "quote_plus"}, {"do": "quote"}, {"do": "json"}]
    pushed = workhive(
        tmp_path, "--storage", storage, "push", "jobs", "-", "--json",
        stdin="".join(json.dumps(i) + "\n" for i in items), **env,
    )  # fmt: skip
    assert pushed.code == 0, pushed
    ids = pushed.json()["ids"]
    run = workhive(
        tmp_path, "--storage", storage, "work", "jobs", "--handler", "handlers:leaky_encoded",
        "--credentials", "env:ENC_KEY", "--processes", "1", "--max-attempts", "1", "--until-empty",
        "--progress", "log", "-v", **env,
    )  # fmt: skip
    assert run.code == 0, run
    _assert_clean("work's stdout", run.out)
    _assert_clean("work's stderr", run.err)

    # The commands below run without the key: what they show is what the fleet stored.
    shown = {}
    for item_id in ids:
        show = workhive(tmp_path, "--storage", storage, "show", "jobs", item_id, "--json", **env)
        assert show.code == 0, show
        _assert_clean("show --json", show.out)
        shown[item_id] = show.json()
        human = workhive(tmp_path, "--storage", storage, "show", "jobs", item_id, **env)
        assert human.code == 0, human
        _assert_clean("show", human.out)
    r = "**********"
    assert shown[ids[0]]["result"] == {
        "echo": f"called with {r}",
        "nested": {"list": [r, {"again": r}], "n": 1},
        r: "as a key",
    }
    capped = " (poisoned after 1 attempts: the fleet's max_attempts)"
    assert shown[ids[1]]["error"] == f"RuntimeError: GET https://api.example/v1?key={r} -> 401{capped}", shown[ids[1]]
    assert shown[ids[2]]["error"] == f"Permanent: the API refused key={r}", shown[ids[2]]
    assert shown[ids[3]]["error"] == 'Permanent: HTTP 401: {"error": {"key": "' + r + '"}}', shown[ids[3]]
    for extra in ((), ("--json",)):
        dead = workhive(tmp_path, "--storage", storage, "dead", "jobs", *extra, **env)
        assert dead.code == 0, dead
        _assert_clean("dead", dead.out)
    files = list(tmp_path.glob("enc/hive.db*"))
    assert files
    for path in files:
        _assert_clean(str(path), path.read_bytes())
