"""A worker process's error output, passed on by the supervisor with every secret scrubbed.

Whatever a worker process writes to its stderr (its log lines, a traceback
Python prints as a thread dies, the last words of a process a handler ended)
reaches the operator only through here: the supervisor reads the other end of
a pipe, scrubs each line (``workhive.redaction``) and writes it to its own
stderr. The supervisor holds the secrets its children hold: the fleet's
credentials and the storage URL's password are registered in it before any
child starts.

>>> import os
>>> from workhive.redaction import forget_secrets, register_secret
>>> register_secret("sk-relay-0123456789")
>>> read_fd, write_fd = os.pipe()
>>> shown = []
>>> relay = OutputRelay(read_fd, write=shown.append)
>>> _ = os.write(write_fd, b"fatal: key sk-relay-0123456789\\npartial ")
>>> os.close(write_fd)
>>> relay.read()
False
>>> shown
['fatal: key **********\\n', 'partial ']
>>> forget_secrets()
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

from workhive.redaction import scrub

__all__ = ["OutputRelay"]

#: a line longer than this without a newline is passed on in pieces, keeping its last
#: KEEP_BACK bytes for the next piece so that a secret cut in two is still found whole
MAX_LINE = 65536
KEEP_BACK = 4096


def _to_stderr(text: str) -> None:
    stream = sys.stderr
    if stream is None:  # pythonw, a daemon with stderr closed: nowhere to show it
        return
    try:
        stream.write(text)
        stream.flush()
    except (OSError, ValueError):  # a closed or broken stderr: the output is lost, the fleet goes on
        pass


class OutputRelay:
    """Reads one child's output pipe (non-blocking) and passes it on line by line, scrubbed."""

    def __init__(self, fd: int, *, write: Callable[[str], None] = _to_stderr) -> None:
        self.fd = fd
        self.closed = False
        self._write = write
        self._buffer = b""
        os.set_blocking(fd, False)

    def read(self) -> bool:
        """Pass on what the pipe holds now; False once it reached its end (then the rest is passed on too)."""
        while True:
            try:
                data = os.read(self.fd, 65536)
            except BlockingIOError:
                return True
            except OSError:
                data = b""
            if not data:
                self._emit(self._buffer)
                self._buffer = b""
                return False
            self._buffer += data
            head, newline, tail = self._buffer.rpartition(b"\n")
            if newline:
                self._emit(head + newline)
                self._buffer = tail
            if len(self._buffer) > MAX_LINE:
                # Scrubbed before it is cut: a secret whole in the buffer is replaced, and one cut
                # off by the end of what has arrived lies in the part kept back.
                clean = _scrubbed(self._buffer)
                self._emit(clean[:-KEEP_BACK], scrubbed=True)
                self._buffer = clean[-KEEP_BACK:]

    def close(self) -> None:
        """Pass on what is left in the pipe, then close it."""
        if self.closed:
            return
        self.read()
        self._emit(self._buffer)
        self._buffer = b""
        self.closed = True
        os.close(self.fd)

    def _emit(self, data: bytes, *, scrubbed: bool = False) -> None:
        if data:
            self._write((data if scrubbed else _scrubbed(data)).decode("utf-8", "replace"))


def _scrubbed(data: bytes) -> bytes:
    # surrogateescape: bytes that are not UTF-8 (or a character cut in two) survive the round trip
    return scrub(data.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
