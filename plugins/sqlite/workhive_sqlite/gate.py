"""The write gate: writers queue in the kernel behind a long write instead of polling SQLite's lock.

SQLite's busy handler polls the write lock, sleeping 1, 2, 5, 10… ms between
tries. Behind a write of a few hundred items (a millisecond or more), the lock
then often sits free after the commit while every process that wants it
sleeps. The gate queues them instead: every write takes ``flock(LOCK_EX)`` on
a side file (``<database>-whgate``) before SQLite's write lock and lets it go
after the commit, and a writer blocked there is woken by the kernel the moment
it is let go.

Queueing behind *short* writes is worse than sleeping: each of them then hands
the gate to a process that must first be woken and scheduled, and on 2 cores
bench/sqlite.py's per-item loops fell to 0.71x (4 processes) and 0.55x (16)
of their rate that way (a lock convoy). So a write queues only behind a long
one. The event loop's connection only *tries* the gate; a write that finds it
taken looks at the second side file (``<database>-whgate-long``), which a long
write (one the backend runs on its thread by size: ``SqliteStorage._thread``)
holds as well:

* taken: the write waits on the gate, on the connection's thread, queued;
* free: a short write holds the gate, and the write waits on the thread as
  before, in SQLite's busy handler, without the gate (which guards nothing).

The gate only orders writers; SQLite's own locks still make every operation
atomic. A writer that does not take it (another program on the file, an older
workhive, a handle whose side files could not be opened) is as safe as before.

* Reads never take it: in WAL mode they do not wait for writers, and a long
  scan must not start to. Checkpoints do not either.
* Each handle opens the gate twice (the loop's tries, the thread's waits) and
  the long mark twice (held by the thread's long writes, looked at from the
  loop): ``flock`` locks belong to an open file, so these exclude each other,
  and other handles in the same process, as other processes do.
* A process that dies holding the gate loses it with its descriptors. One
  *stopped* while holding it for a long write (SIGSTOP, a debugger) holds up
  the writers queued behind it until it resumes, as it then holds SQLite's
  write lock too; they wait for it instead of failing after ``busy_timeout``.
* The side files hold no data, are created with the database file's
  permissions, and are never deleted (a writer may be waiting on one).

Example::

    gate = WriteGate.open(Path("hive.db"))
    if gate is not None and gate.try_enter():
        try:
            ...  # a short write, on the event loop's connection
        finally:
            gate.leave()
"""

from __future__ import annotations

import fcntl
import logging
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

__all__ = ["GATE_SUFFIX", "LONG_SUFFIX", "WriteGate"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: The gate's side file is the database file's name plus this ...
GATE_SUFFIX = "-whgate"
#: ... and the file a long write holds beside it, this.
LONG_SUFFIX = "-whgate-long"


class WriteGate:
    """One handle's places in the queue for a database file's write lock (see the module)."""

    def __init__(self, loop_fd: int, thread_fd: int, long_fd: int, probe_fd: int) -> None:
        self._loop_fd = loop_fd  # the event loop's tries
        self._thread_fd = thread_fd  # the connection's thread's waits
        self._long_fd = long_fd  # held by the thread through a long write
        self._probe_fd = probe_fd  # the loop's look at whether a long write holds the gate

    @classmethod
    def open(cls, database: Path) -> WriteGate | None:
        """The gate of ``database`` (a file that exists), or None when a side file cannot be opened."""
        try:
            mode = stat.S_IMODE(os.stat(database).st_mode) & 0o666
        except OSError:
            mode = 0o644
        paths = [f"{database}{GATE_SUFFIX}"] * 2 + [f"{database}{LONG_SUFFIX}"] * 2
        fds: list[int] = []
        try:
            for path in paths:
                fds.append(os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, mode))
        except OSError as exc:
            for fd in fds:
                os.close(fd)
            # Only the queueing is lost: SQLite's busy handler orders the writers instead.
            log.debug("write gate of %s not opened (%s); writers wait in SQLite's busy handler", database, exc)
            return None
        return cls(*fds)

    def try_enter(self) -> bool:
        """Take the gate for the event loop's connection if it is free; never waits."""
        try:
            fcntl.flock(self._loop_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def leave(self) -> None:
        """Let go of what ``try_enter`` took."""
        fcntl.flock(self._loop_fd, fcntl.LOCK_UN)

    def long_write_holds_it(self) -> bool:
        """Whether a long write holds the gate now (then a write waiting for it should queue)."""
        try:
            fcntl.flock(self._probe_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(self._probe_fd, fcntl.LOCK_UN)
        return False

    def through(self, fn: Callable[..., T], *args: Any, long: bool = False) -> T:
        """``fn(*args)`` holding the gate, queued for it first; ``long``: marked as a long write.

        On the connection's thread only: it blocks.
        """
        fcntl.flock(self._thread_fd, fcntl.LOCK_EX)
        try:
            if not long:
                return fn(*args)
            # Only the gate's holder takes this, so at most a probe holds it, for a moment.
            fcntl.flock(self._long_fd, fcntl.LOCK_EX)
            try:
                return fn(*args)
            finally:
                fcntl.flock(self._long_fd, fcntl.LOCK_UN)
        finally:
            fcntl.flock(self._thread_fd, fcntl.LOCK_UN)

    def through_long(self, fn: Callable[..., T], *args: Any) -> T:
        """``through(fn, *args, long=True)``, in a form aiosqlite's ``_execute(fn, *args)`` can call."""
        return self.through(fn, *args, long=True)

    def close(self) -> None:
        """Close the descriptors (which lets go of the gate, if held)."""
        for fd in (self._loop_fd, self._thread_fd, self._long_fd, self._probe_fd):
            os.close(fd)
        self._loop_fd = self._thread_fd = self._long_fd = self._probe_fd = -1
