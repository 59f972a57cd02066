"""``workhive push --group NAME`` and ``--group-field FIELD``: refused input, before any storage is opened.

--no-plugins makes every storage unavailable, so a test that gets its error
proves the check came first and nothing was pushed. Pushing grouped items to a
real store is in plugins/memory/tests/test_memory_cli_groups.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from workhive.cli import main
from workhive.testing.environment import without_workhive_settings


@pytest.fixture(autouse=True)
def clean_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return without_workhive_settings(monkeypatch, tmp_path)


def one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run the CLI, which must fail with exit status 2 and a one-line error; returns that line."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    _, err = capsys.readouterr()
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (code, err)
    return lines[0]


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ('{"other": 1}', "no such field"),
        ('{"tenant": 42}', "42"),
        ('{"tenant": null}', "None"),
        ('["tenant"]', "no such field"),
    ],
)
def test_an_item_without_a_string_group_field_is_a_bad_line(
    capsys: pytest.CaptureFixture[str], clean_env: Path, line: str, why: str
) -> None:
    (clean_env / "items.jsonl").write_text('{"tenant": "t-1"}\n' + line + "\n")
    error = one_line_error(capsys, "--no-plugins", "push", "jobs", "items.jsonl", "--group-field", "tenant")
    for fragment in ("items.jsonl line 2", "--group-field 'tenant'", why, "nothing was pushed"):
        assert fragment in error, error


def test_a_group_field_that_is_no_valid_name_is_a_bad_line(capsys: pytest.CaptureFixture[str], clean_env: Path) -> None:
    (clean_env / "items.jsonl").write_text('{"tenant": "has space"}\n')
    error = one_line_error(capsys, "--no-plugins", "push", "jobs", "items.jsonl", "--group-field", "tenant")
    for fragment in ("line 1", "--group-field 'tenant'", "'has space' is not allowed", "nothing was pushed"):
        assert fragment in error, error


def test_a_bad_group_or_both_options_are_refused(capsys: pytest.CaptureFixture[str], clean_env: Path) -> None:
    (clean_env / "items.jsonl").write_text('{"tenant": "t-1"}\n')
    error = one_line_error(capsys, "--no-plugins", "push", "jobs", "items.jsonl", "--group", "a/b")
    assert "--group" in error and "'a/b' is not allowed" in error, error
    both = ("--group", "t-1", "--group-field", "tenant")
    error = one_line_error(capsys, "--no-plugins", "push", "jobs", "items.jsonl", *both)
    assert "give one" in error, error
