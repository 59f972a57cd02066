"""``workhive push``: every line is checked before any is written; a failure part-way says what is stored.

The storage here is a plugin made for the test (installed as a distribution
on ``sys.path``, as a real one would be) that records each backend call and
every row it kept, and can be told to fail on its Nth write.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from workhive.cli import cli, main
from workhive.testing.environment import without_workhive_settings

RECORDER = """
import workhive
from workhive.errors import StorageUnavailable
from workhive.storage import REQUIRED_METHODS

ROWS = []        # (pool, payload, dedup key) of every item kept
WRITES = []      # items per push call, failed ones included
FAIL_ON = [None] # the push call (1-based) that fails


class Backend:
    capabilities = frozenset()

    def __init__(self, url, **options):
        self.url = url

    async def open(self):
        pass

    async def close(self):
        pass

    async def push(self, pool, items):
        WRITES.append(len(items))
        if FAIL_ON[0] == len(WRITES):
            raise StorageUnavailable("database or disk is full (injected by the test)")
        first = len(ROWS) + 1
        ROWS.extend((pool, i.payload, i.dedup_key) for i in items)
        return [f"i{n:016x}" for n in range(first, first + len(items))]



def _unused(name):
    async def method(self, *args, **kwargs):
        raise AssertionError(f"push must not need storage.{name}")

    return method


# The rest of the storage contract exists (Hive checks it) but push must never reach it.
for _name in REQUIRED_METHODS:
    if not hasattr(Backend, _name):
        setattr(Backend, _name, _unused(_name))


@workhive.hookimpl
def workhive_storage():
    return workhive.StoragePlugin(name="pushrec", factory=Backend, description="records pushes")
"""

DEEP = "[" * 100_000 + "]" * 100_000

BAD_LINES = [
    pytest.param('{"a": "\\ud800"}', "lone surrogate '\\ud800'", id="escaped-surrogate"),
    pytest.param('{"k\\udc80": 1}', "lone surrogate", id="surrogate-in-key"),
    pytest.param(DEEP, "nested more than 256 levels", id="100k-levels"),
    pytest.param("[" * 300 + "]" * 300, "nested more than 256 levels", id="300-levels"),
    pytest.param('{"n": ' + "9" * 4301 + "}", "more than 4300 digits", id="huge-int"),
    pytest.param('{"n": 1', "not valid JSON", id="bad-json"),
    pytest.param('{"n": NaN}', "not a JSON number", id="nan"),
]


@pytest.fixture
def recorder(fake_distribution: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """The recording storage plugin, installed; the test runs in an empty directory with no WORKHIVE_* settings."""
    work = tmp_path / "work"
    work.mkdir()
    without_workhive_settings(monkeypatch, work)
    fake_distribution("wh-pushrec", "1.0", {"pushrec": RECORDER})
    __import__("wh_pushrec_pushrec")
    return sys.modules["wh_pushrec_pushrec"]


def push(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    try:
        code = main(["--storage", "pushrec://test", "push", "jobs", *args])
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    out, err = capsys.readouterr()
    return int(code or 0), out, err


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def good(n: int) -> list[str]:
    return [json.dumps({"n": i}) for i in range(n)]


@pytest.mark.parametrize(("line", "fragment"), BAD_LINES)
def test_a_bad_line_after_many_good_ones_is_named_and_nothing_is_pushed(
    recorder: Any, capsys: pytest.CaptureFixture[str], line: str, fragment: str
) -> None:
    source = write_lines(Path("items.jsonl"), ["", *good(1_500), line, *good(10)])
    code, out, err = push(capsys, str(source))
    assert code == 2 and out == ""
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: items.jsonl line 1502: ")
    assert fragment in lines[0]
    assert "nothing was pushed" in lines[0]
    assert recorder.WRITES == [] and recorder.ROWS == []


def test_a_bad_line_from_stdin_is_named_too(
    recorder: Any, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_lines(Path("items.jsonl"), [*good(1_200), '{"a": "\\udfff"}'])
    monkeypatch.setattr(sys, "stdin", source.open(encoding="utf-8"))
    code, _, err = push(capsys, "-")
    assert code == 2 and "line 1201: " in err and "lone surrogate" in err
    assert recorder.WRITES == []


def test_good_lines_are_written_in_batches_of_1000(recorder: Any, capsys: pytest.CaptureFixture[str]) -> None:
    source = write_lines(Path("items.jsonl"), good(2_500))
    code, out, _ = push(capsys, str(source))
    assert code == 0 and "pushed 2500 items to jobs" in out
    assert recorder.WRITES == [1000, 1000, 500]
    assert [json.loads(payload)["n"] for _, payload, _ in recorder.ROWS] == list(range(2_500))


def test_a_storage_failure_part_way_says_what_was_pushed_and_where_to_resume(
    recorder: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    recorder.FAIL_ON[0] = 2
    source = write_lines(Path("items.jsonl"), ["", *good(2_500)])  # line 1 blank: items start at line 2
    code, _, err = push(capsys, str(source))
    assert code == 2 and "Traceback" not in err
    assert "disk is full" in err
    assert "1000 items (the lines before items.jsonl line 1002) were pushed to jobs" in err
    assert "none from line 1002 on" in err and "tail -n +1002" in err
    assert recorder.WRITES == [1000, 1000]
    assert [json.loads(payload)["n"] for _, payload, _ in recorder.ROWS] == list(range(1_000))


def test_a_failure_of_the_first_batch_is_reported_as_it_is(recorder: Any, capsys: pytest.CaptureFixture[str]) -> None:
    recorder.FAIL_ON[0] = 1
    source = write_lines(Path("items.jsonl"), good(10))
    code, _, err = push(capsys, str(source))
    assert code == 2 and "disk is full" in err and "were pushed" not in err
    assert recorder.ROWS == []


def test_a_dedup_key_field_too_long_is_a_bad_line_before_anything_is_written(
    recorder: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [json.dumps({"id": f"k{i}"}) for i in range(1_100)] + [json.dumps({"id": "x" * 1001})]
    source = write_lines(Path("items.jsonl"), lines)
    code, _, err = push(capsys, str(source), "--dedup-key-field", "id")
    assert code == 2 and "line 1101" in err and "dedup_key must be" in err and "nothing was pushed" in err
    assert recorder.WRITES == []


def test_skip_invalid_pushes_the_good_lines_and_names_the_bad(
    recorder: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    source = write_lines(Path("items.jsonl"), ['{"n": 1}', '{"a": "\\ud800"}', DEEP, '{"n": 2}'])
    code, out, _ = push(capsys, str(source), "--skip-invalid", "--json")
    assert code == 0
    report = json.loads(out)
    assert report["pushed"] == 2
    assert [b["line"] for b in report["skipped"]] == [2, 3]
    assert [json.loads(payload) for _, payload, _ in recorder.ROWS] == [{"n": 1}, {"n": 2}]


def test_help_says_how_push_batches_and_what_a_failure_leaves() -> None:
    result = CliRunner().invoke(cli, ["push", "--help"])
    assert result.exit_code == 0
    text = " ".join(result.output.split())
    assert "Every line is checked before anything is written" in text
    assert "batches of 1000, each batch one transaction" in text
    assert "the batches before the failure stay pushed and none after" in text
