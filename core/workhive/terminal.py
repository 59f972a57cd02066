"""Text for people: stored and handler text made safe to write to a terminal.

Item errors, results, worker details and log messages come from handlers and
the APIs they call, so they may hold terminal control sequences: ``ESC [2J``
clears the screen, OSC 52 (``ESC ]52;c;…BEL``) sets the clipboard, a bare
``CR`` overwrites what a line said. Human output (every CLI command without
``--json``, ``work``'s progress lines and report, the log lines on stderr)
shows such characters as visible escapes, whether or not the output is a
terminal: a pipe into ``less -R`` or a later ``cat`` of a log file reaches a
terminal too. ``--json`` never goes through here: JSON escapes them itself,
and scripts get the exact text.

Escaped: the C0 controls (``\\n`` and ``\\t`` are kept in multi-line text),
DEL, the C1 controls, the line and paragraph separators, and the bidirectional
overrides and isolates (which reorder what a line appears to say).
Backslashes are left as they are, so ``\\x1b`` in the output may also be
those four characters in the text; ``--json`` tells them apart.

>>> human("boom\\x1b]52;c;ZXZpbA==\\x07 then \\x1b[2J")
'boom\\\\x1b]52;c;ZXZpbA==\\\\x07 then \\\\x1b[2J'
>>> human("line 1\\nline 2\\ttab", one_line=True)
'line 1\\\\nline 2\\\\ttab'
"""

from __future__ import annotations

import logging
import sys
from typing import Any

from workhive.redaction import scrub

__all__ = ["LOG_FORMAT", "TerminalLogFormatter", "escape_controls", "human", "log_to_stderr"]

#: the format of every log line workhive writes to stderr (the supervisor's and the workers')
LOG_FORMAT = "%(asctime)s %(process)d %(name)s %(levelname)s %(message)s"

_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}
_UNSAFE = [
    *range(0x00, 0x20),
    0x7F,
    *range(0x80, 0xA0),
    0x061C,  # Arabic letter mark (bidi)
    0x200E,
    0x200F,  # left-to-right and right-to-left marks
    0x2028,
    0x2029,  # line and paragraph separators: a line break to some terminals and editors
    *range(0x202A, 0x202F),  # bidi embeddings and overrides
    *range(0x2066, 0x206A),  # bidi isolates
]


def _escape(code: int) -> str:
    char = chr(code)
    if char in _SHORT:
        return _SHORT[char]
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


_ONE_LINE = str.maketrans({code: _escape(code) for code in _UNSAFE})
_MULTI_LINE = str.maketrans({code: _escape(code) for code in _UNSAFE if chr(code) not in "\n\t"})


def escape_controls(text: str, *, one_line: bool = False) -> str:
    """``text`` with every control character written as a visible escape (``\\x1b``, ``\\r``, ``\\u202e``).

    ``one_line``: newlines and tabs are escaped too (a table cell, a progress line).

    >>> escape_controls("a\\x1b[31mred\\x9b\\x7f")
    'a\\\\x1b[31mred\\\\x9b\\\\x7f'
    """
    if text.isprintable():  # the usual case, decided in C: nothing to escape (\n and \t are not printable)
        return text
    return text.translate(_ONE_LINE if one_line else _MULTI_LINE)


def human(text: Any, *, one_line: bool = False) -> str:
    """``text`` as a person may see it: secrets scrubbed, control characters escaped.

    Scrubbed before it is escaped, so a key that contains a control character
    is still recognised.
    """
    return escape_controls(scrub(str(text)), one_line=one_line)


class TerminalLogFormatter(logging.Formatter):
    """A ``logging.Formatter`` whose lines cannot steer a terminal.

    The message is one line (its newlines escaped, so a handler's text cannot
    forge further log lines); a traceback keeps its lines, with control
    characters escaped. The record itself is not changed: other handlers
    (a user's JSON log, pytest's capture) still get the exact text.
    """

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        text = escape_controls(self.formatMessage(record), one_line=True)
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            text += "\n" + escape_controls(record.exc_text)
        if record.stack_info:
            text += "\n" + escape_controls(self.formatStack(record.stack_info))
        return text


def log_to_stderr(level: str | int) -> None:
    """Log at ``level`` to stderr in ``LOG_FORMAT``, control characters escaped (no-op if logging is set up)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(TerminalLogFormatter(LOG_FORMAT))
    logging.basicConfig(level=level, handlers=[handler])
