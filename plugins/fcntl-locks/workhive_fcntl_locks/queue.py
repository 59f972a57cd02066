"""The waiting line of one lock: a directory of FIFOs, one per waiting provider.

Why it exists: ``flock`` has no queue. A process that releases a lock and
asks for it again at once wins against waiters that are asleep between
tries, so without help a waiter can starve behind a busy neighbour.

How it works:

* A provider whose first try failed **joins** the line of that lock: it
  creates a FIFO named ``<time_ns>-<pid>-<n>`` in ``<lock file>.queue/`` and
  keeps it open for reading. Names sort by arrival. The FIFO is made under a
  hidden name (``.`` first), opened, and only then renamed into the line, so
  an entry is never visible before it is alive: otherwise a holder that
  looked at it in between would take it for dead and remove it while its
  owner waited on, out of line and unseen.
* A releasing holder **rings** the first live entry that is not its own (one
  byte into its FIFO, which wakes that provider's event loop at once) and,
  when there was one, **yields**: its next acquisitions wait until the
  token has moved on (someone from the line took the lock).
* **Liveness belongs to the kernel**, as for the lock itself: an entry is
  alive while its FIFO is open for reading, and opening it for writing with
  ``O_NONBLOCK`` fails with ``ENXIO`` as soon as its owner closed it or died
  (even by SIGKILL). Whoever meets such a dead entry removes it, so a waiter
  that dies never holds anyone up.
* Ringing is only a wake-up: mutual exclusion, tokens and holder records stay
  with the lock file. A lost ring costs a waiter one backoff pause, never
  correctness.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
import time

__all__ = ["QUEUE_SUFFIX", "Entry", "first_other", "join", "leave", "move_to_back", "present", "queue_dir_for", "sweep"]

QUEUE_SUFFIX = ".queue"
HIDDEN = "."  # prefix of a FIFO being made; never rung, never counted as a waiter
STALE_HIDDEN_SECONDS = 60.0  # a hidden FIFO this old belongs to a joiner that died before showing it
_READ_FLAGS = os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW  # RDWR: never a hang-up, so no busy loop
_RING_FLAGS = os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOFOLLOW
_counter = itertools.count()


class Entry:
    """This provider's place in one lock's line: the FIFO's name and the open read end."""

    __slots__ = ("directory", "fd", "name")

    def __init__(self, directory: str, name: str, fd: int) -> None:
        self.directory = directory
        self.name = name
        self.fd = fd


def queue_dir_for(lock_path: str, lock_suffix: str) -> str:
    """``<dir>/<slug>-<hash>.queue`` for ``<dir>/<slug>-<hash>.lock`` (so any lock name stays safe)."""
    return lock_path[: -len(lock_suffix)] + QUEUE_SUFFIX


def _new_name() -> str:
    # Sorts by arrival; pid and a counter keep two providers apart even within one nanosecond.
    return f"{time.time_ns():020d}-{os.getpid()}-{next(_counter)}"


def join(directory: str) -> Entry:
    """Take a place at the back of the line in ``directory``; ``OSError`` if FIFOs cannot be made there."""
    for _ in range(100):
        try:
            os.mkdir(directory, 0o755)
        except FileExistsError:
            pass
        name = _new_name()
        hidden = os.path.join(directory, HIDDEN + name)
        try:
            os.mkfifo(hidden, 0o600)
        except FileNotFoundError:
            continue  # the empty directory was swept between mkdir and mkfifo: again
        try:
            fd = os.open(hidden, _READ_FLAGS)
        except FileNotFoundError:
            continue  # removed as a stale leftover (we were stopped for minutes): again
        except OSError:
            _remove(hidden)
            raise
        try:
            # Visible only now, open for reading: whoever finds it dead from here on is right.
            os.rename(hidden, os.path.join(directory, name))
        except FileNotFoundError:
            os.close(fd)
            continue
        except OSError:
            os.close(fd)
            _remove(hidden)
            raise
        return Entry(directory, name, fd)
    raise OSError(errno.EAGAIN, "the queue directory keeps changing under us", directory)


def leave(entry: Entry) -> None:
    """Give up the place (after taking the lock, or giving up waiting)."""
    try:
        os.unlink(os.path.join(entry.directory, entry.name))
    except OSError:
        pass  # already swept as dead by someone else: nothing to remove
    os.close(entry.fd)


def present(entry: Entry) -> bool:
    """Whether ``entry`` is still in its line (under its name, as the FIFO we hold open)."""
    try:
        return (
            os.stat(os.path.join(entry.directory, entry.name), follow_symlinks=False).st_ino
            == os.fstat(entry.fd).st_ino
        )
    except FileNotFoundError:
        return False


def move_to_back(entry: Entry) -> bool:
    """Go to the back of the line (a task of ours got the lock, others still wait); False if the entry is gone."""
    name = _new_name()
    try:
        os.rename(os.path.join(entry.directory, entry.name), os.path.join(entry.directory, name))
    except FileNotFoundError:
        return False
    entry.name = name
    return True


def first_other(directory: str, mine: str | None, *, ring: bool) -> bool:
    """Whether a live entry other than ``mine`` waits in ``directory``; ``ring`` wakes the first one.

    Dead entries met on the way are removed.
    """
    try:
        names = sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return False
    for name in names:
        if name == mine or name.startswith(HIDDEN):
            continue
        path = os.path.join(directory, name)
        try:
            fd = os.open(path, _RING_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # nobody reads it: its waiter left or died
                _remove(path)
            continue  # ENOENT: it left meanwhile; anything else is not a waiter of ours
        try:
            if not stat.S_ISFIFO(os.fstat(fd).st_mode):
                continue  # not a waiter's FIFO (something else put it there): never written to
            if ring:
                os.write(fd, b"\0")
        except BlockingIOError:
            pass  # its pipe is full of rings it has not read yet: it is awake anyway
        finally:
            os.close(fd)
        return True
    return False


def sweep(directory: str) -> None:
    """Remove dead entries, and the directory when nobody waits in it any more (for ``clean``)."""
    try:
        names = os.listdir(directory)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        path = os.path.join(directory, name)
        if name.startswith(HIDDEN) and not _stale(path):
            continue  # a joiner is between making its FIFO and opening it: not dead, just not in line yet
        try:
            fd = os.open(path, _RING_FLAGS)
        except OSError as exc:
            if exc.errno == errno.ENXIO:
                _remove(path)
            continue
        os.close(fd)
    try:
        os.rmdir(directory)
    except OSError:
        pass  # someone waits (or joined meanwhile): the line stays


def _stale(path: str) -> bool:
    # A hidden FIFO lives for microseconds unless its joiner died (or was stopped) before renaming it.
    try:
        return time.time() - os.stat(path, follow_symlinks=False).st_mtime > STALE_HIDDEN_SECONDS
    except OSError:
        return False


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass
