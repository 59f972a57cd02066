"""Human output cannot steer a terminal: control characters in stored and handler text are shown as escapes.

``workhive.terminal`` is the one helper; the CLI's ``echo``/``table``, ``work``'s progress line and the log
lines on stderr use it. The CLI end to end is in tests/integration/test_terminal_output.py.
"""

from __future__ import annotations

import logging
import sys
import unicodedata

import pytest


class TestTerminalText:
    """``workhive.terminal``: human output shows control characters as escapes; the text is otherwise kept."""

    @pytest.mark.parametrize(
        ("raw", "shown"),
        [
            ("clear \x1b[2J screen", "clear \\x1b[2J screen"),
            ("clip \x1b]52;c;ZXZpbA==\x07 done", "clip \\x1b]52;c;ZXZpbA==\\x07 done"),
            ("osc \x1b]0;title\x1b\\ st", "osc \\x1b]0;title\\x1b\\ st"),
            ("c1 csi \x9b2J and nel \x85", "c1 csi \\x9b2J and nel \\x85"),
            ("nul \x00 bell \x07 bs \x08 del \x7f", "nul \\x00 bell \\x07 bs \\x08 del \\x7f"),
            ("cr\roverwrite", "cr\\roverwrite"),
            ("bidi \u202eevil\u202c ls \u2028", "bidi \\u202eevil\\u202c ls \\u2028"),
            ("kept: é 😀 \u00a0 tab\tnew\nline", "kept: é 😀 \u00a0 tab\tnew\nline"),
        ],
    )
    def test_control_characters_are_escaped_and_the_rest_kept(self, raw: str, shown: str) -> None:
        from workhive.terminal import escape_controls

        assert escape_controls(raw) == shown
        assert escape_controls(raw, one_line=True) == shown.replace("\t", "\\t").replace("\n", "\\n")

    def test_nothing_a_terminal_acts_on_is_left(self) -> None:
        from workhive.terminal import escape_controls

        everything = "".join(chr(c) for c in range(0x00, 0x2070))
        shown = escape_controls(everything, one_line=True)
        assert all(unicodedata.category(ch) not in ("Cc", "Zl", "Zp") for ch in shown)
        assert not any(ch in shown for ch in "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")

    def test_human_scrubs_then_escapes(self) -> None:
        from workhive.redaction import forget_secrets, register_secret
        from workhive.terminal import human

        register_secret("sk-TERMINAL-0123\x1b")
        try:
            assert human("key sk-TERMINAL-0123\x1b[2J") == "key **********[2J"
        finally:
            forget_secrets()

    def test_the_progress_line_escapes_a_handlers_error(self) -> None:
        from workhive.runtime.progress import FleetProgress, format_line

        error = "RuntimeError: boom \x1b[2J\x1b]52;c;ZXZpbA==\x07 \x9b1m"
        progress = FleetProgress(
            pool="jobs", elapsed=3.0, done=1, failed=1, poisoned=0, released=0, rate=1.0, eta=None,
            pending=0, delayed=0, claimed=0, processes=1, workers=1,
            disabled={"KEY\x1b[2J": "x"}, last_errors={"i1": error},
        )  # fmt: skip
        line = format_line(progress)
        assert "\x1b" not in line and "\x07" not in line and "\x9b" not in line
        assert "last error i1: RuntimeError: boom \\x1b[2J\\x1b]52;c;ZXZpbA==\\x07 \\x9b1m" in line
        assert "disabled KEY\\x1b[2J" in line

    def test_log_lines_escape_messages_and_tracebacks_but_leave_the_record_alone(self) -> None:
        from workhive.terminal import LOG_FORMAT, TerminalLogFormatter

        formatter = TerminalLogFormatter(LOG_FORMAT)
        try:
            raise RuntimeError("inner \x1b]52;c;ZXZpbA==\x07")
        except RuntimeError:
            record = logging.getLogger("workhive.test.terminal").makeRecord(
                "workhive.test.terminal", logging.WARNING, __file__, 1,
                "item %s failed: %s", ("i1", "boom\x1b[2J\nforged line"), sys.exc_info(),
            )  # fmt: skip
        line = formatter.format(record)
        assert "\x1b" not in line and "\x07" not in line
        first, *traceback_lines = line.split("\n")
        assert first.endswith("item i1 failed: boom\\x1b[2J\\nforged line")
        assert traceback_lines[0] == "Traceback (most recent call last):"
        assert traceback_lines[-1] == "RuntimeError: inner \\x1b]52;c;ZXZpbA==\\x07"
        assert record.getMessage() == "item i1 failed: boom\x1b[2J\nforged line"  # other handlers get it exact

    def test_the_fleet_report_escapes_a_disabled_keys_reason_and_json_keeps_it(
        self, capsys: pytest.CaptureFixture[str]
    ) -> None:
        from workhive.cli.work_cmd import print_report, report_json
        from workhive.runtime.options import FleetReport

        reason = "HTTP 401: \x1b]52;c;ZXZpbA==\x07 revoked"
        report = FleetReport(
            pool="jobs", done=1, failed=0, poisoned=1, released=0, rate_limited={},
            disabled_credentials={"API_KEY": reason}, workers_started=1, workers_lost=0, elapsed=1.0,
            exit_code=1, reason="every credential is disabled \x1b[2J",
        )  # fmt: skip
        print_report(report)
        out = capsys.readouterr().out
        assert "\x1b" not in out and "\x07" not in out
        assert "credential disabled: API_KEY (HTTP 401: \\x1b]52;c;ZXZpbA==\\x07 revoked)" in out
        assert "exit 1: every credential is disabled \\x1b[2J" in out
        assert report_json(report)["disabled_credentials"] == {"API_KEY": reason}  # --json: exact
