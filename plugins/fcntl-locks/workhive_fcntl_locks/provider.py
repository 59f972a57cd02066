"""``FcntlLocks``: named locks with ``flock(2)`` on one file per name.

One file per name in the lock directory; the kernel owns liveness (a dead
holder's ``flock`` goes with its process); fencing tokens are kept in the
file's first line and survive restarts and ``clean()``; waiters line up in
``workhive_fcntl_locks.queue``. Why each of these is correct, and what is
not promised (no fsync; no ``fork()`` while holding): ``docs/fcntl-locks.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import fcntl
import logging
import math
import os
import re
import socket
import time

from workhive.errors import InvalidArgument, LockNotHeld, LockSystemError, LockTimeout
from workhive.locks import (
    HeldLock,
    LockHolder,
    check_lock_args,
    check_lock_name,
    decode_holder,
    encode_holder,
    holder_from_record,
    lock_file_name,
    lock_timeout_error,
    poll_until,
    report_overdue,
)
from workhive_fcntl_locks import queue
from workhive_fcntl_locks.url import DEFAULT_DIRECTORY, directory_from_url

__all__ = ["FcntlLocks"]

logger = logging.getLogger("workhive.locks")

SUFFIX = ".lock"
FLOOR_FILE = ".token-floor"
_OPEN_FLAGS = os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW
_OTHER_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
#: The stem of every file ``lock_file_name`` makes: a slug of up to 40 of ``[A-Za-z0-9_.-]``
#: not starting with a dot, then "-" and the name's SHA-256 in hex. Listing and cleaning touch
#: only such files: the directory may hold other files (a SQLite hive named ``*.lock``, say),
#: which must be neither deleted nor opened (closing any descriptor of a file drops every
#: POSIX lock this process holds on it, SQLite's included).
_LOCK_STEM = re.compile(r"[A-Za-z0-9_\-][A-Za-z0-9_.\-]{0,39}-[0-9a-f]{64}")
#: a streak also ends after this many consecutive tokens, so that a holder descheduled in
#: the middle of its time slice and one that ran through it get similar shares
STREAK_TOKENS = 64
_NO_FIFOS = {errno.EPERM, errno.EINVAL, errno.EOPNOTSUPP, errno.ENOSYS}
_RETRY = object()  # "the inode was replaced under us": try again at once, without sleeping


class _Handle:
    """The open, locked file behind a ``HeldLock``."""

    __slots__ = ("fd", "length", "owner", "path", "streak")

    def __init__(self, owner: FcntlLocks, path: str, fd: int, length: int, streak: tuple[float, int]) -> None:
        self.owner = owner
        self.path = path
        self.fd = fd
        self.length = length  # bytes of the record last written, to truncate a longer leftover
        self.streak = streak  # (monotonic start, count) of the run of consecutive tokens this provider took


class _Place:
    """This provider's place in the line of one lock, shared by its tasks that wait for it."""

    __slots__ = ("entry", "loop", "waiting")

    def __init__(self, entry: queue.Entry | None, loop: asyncio.AbstractEventLoop | None) -> None:
        self.entry = entry
        self.loop = loop  # where the entry's reader is registered (None: nobody rings us, we poll)
        self.waiting = 1


class FcntlLocks:
    """Locks in a directory on one machine.

    ``FcntlLocks("fcntl:///.workhive/locks")`` or ``FcntlLocks("/abs/dir")``.
    The directory is created on first use. Use one instance from one event
    loop (thread); other processes and instances coordinate through the files.
    ``handoff_timeout`` bounds how long a releasing holder waits for a process
    in line to take over before it may take the lock again itself.

    >>> async def main():  # doctest: +SKIP
    ...     locks = FcntlLocks("fcntl:///.workhive/locks")
    ...     held = await locks.acquire("repo:acme", ttl=60, timeout=5, worker_id="w1")
    ...     await locks.release(held)
    """

    #: tokens keep rising across provider instances and process restarts
    persistent_tokens = True

    def __init__(
        self,
        url: str | os.PathLike[str] = DEFAULT_DIRECTORY,
        *,
        max_delay: float = 0.05,
        max_streak: float = 0.01,
        handoff_timeout: float = 0.5,
    ) -> None:
        if isinstance(url, str) and (url.lower().startswith("fcntl:") or _OTHER_URL.match(url)):
            self.directory = directory_from_url(url)  # refuses other schemes with the forms it takes
        else:
            self.directory = os.path.abspath(os.fspath(url))
        if not max_delay > 0:
            raise InvalidArgument(f"max_delay must be > 0 seconds, got {max_delay!r}", value=max_delay)
        self.max_delay = max_delay
        for what, value, zero_ok in (("max_streak", max_streak, True), ("handoff_timeout", handoff_timeout, False)):
            if (
                isinstance(value, bool)
                or not isinstance(value, (int, float))
                or not math.isfinite(value)
                or value < 0
                or (value == 0 and not zero_ok)
            ):
                bound = ">= 0" if zero_ok else "> 0"
                raise InvalidArgument(f"{what} must be a finite number of seconds {bound}, got {value!r}", value=value)
        self.max_streak = float(max_streak)
        self.handoff_timeout = float(handoff_timeout)
        self.host = socket.gethostname()
        self._dir_ready = False
        self._held: dict[int, _Handle] = {}
        self._paths: dict[str, str] = {}
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._places: dict[str, _Place] = {}  # lock path -> our place in its line while tasks of ours wait
        self._yields: dict[str, tuple[int, float]] = {}  # lock path -> (token we released, monotonic give-up time)
        self._streaks: dict[str, tuple[int, float, int]] = {}  # lock path -> (last token we released, streak)
        self._ring_soon: set[str] = set()  # lock paths whose line is rung unless we take the lock again at once
        self._queueing = True  # False once the directory refused FIFOs: waiters then only poll
        self._closed = False

    def __repr__(self) -> str:
        return f"FcntlLocks({self.directory!r})"

    # -- paths ----------------------------------------------------------------
    def path_for(self, name: str) -> str:
        """The lock file of ``name`` (always directly inside ``directory``)."""
        path = self._paths.get(name) if isinstance(name, str) else None
        if path is None:
            path = os.path.join(self.directory, lock_file_name(check_lock_name(name), SUFFIX))
            if len(self._paths) >= 1024:  # a worker usually locks a handful of names; stay bounded
                self._paths.clear()
            self._paths[name] = path
        return path

    def _error(self, action: str, path: str, exc: OSError) -> LockSystemError:
        hint = {
            errno.EACCES: "check the permissions of the lock directory",
            errno.EPERM: "check the permissions of the lock directory",
            errno.EROFS: "the file system is read-only: choose a writable lock directory (locks=fcntl:///dir)",
            errno.ENOTDIR: "a parent of the lock directory is a file: choose another directory",
            errno.ELOOP: "the lock file is a symlink, which is refused: remove it",
            errno.ENOSPC: "the disk is full",
        }.get(exc.errno or 0, "check the lock directory")
        return LockSystemError(
            f"cannot {action} {path!r}: {exc.strerror or exc} ({hint})",
            path=path,
            errno=exc.errno,
        )

    def _ensure_dir(self) -> None:
        if self._dir_ready:
            return
        try:
            os.makedirs(self.directory, exist_ok=True)
        except OSError as exc:
            raise self._error("create the lock directory", self.directory, exc) from exc
        self._dir_ready = True

    def _check_open(self) -> None:
        if self._closed:
            raise LockSystemError(f"{self!r} is closed; create a new provider", path=self.directory)

    # -- acquire / release ----------------------------------------------------
    async def acquire(
        self, name: str, *, ttl: float | None = None, timeout: float | None = None, worker_id: str | None = None
    ) -> HeldLock:
        """Take lock ``name``; ``timeout=None`` waits forever, ``0`` tries once (``LockTimeout`` names the holder)."""
        check_lock_args(name, ttl, timeout, worker_id)
        self._check_open()
        self._ensure_dir()
        path = self.path_for(name)
        ttl_f = None if ttl is None else float(ttl)
        reported: set[int] = set()
        next_check = [0.0]

        def on_miss(waited: float) -> None:
            # Look at the holder on the first miss and every few seconds after: an
            # overdue one is logged (once per token) but never broken.
            if waited < next_check[0]:
                return
            next_check[0] = waited + 5.0
            holder = self._read_holder(path)
            if holder is not None and holder.token not in reported and holder.overdue(time.time()):
                reported.add(holder.token)
                report_overdue(holder)

        def attempt() -> HeldLock | None:
            if path in self._yields and self._yielding(path):
                return None  # our turn passed to a process in line; it has not taken the lock yet
            return self._try_acquire(path, name, ttl_f, worker_id)

        in_line = False

        async def nap(pause: float) -> None:
            nonlocal in_line
            if not in_line:  # only after a failed try: an uncontended lock never touches the line
                self._join(path)
                in_line = True
            else:
                self._keep_place(path)
            await self._nap(path, pause)

        held = None
        try:
            held = await poll_until(attempt, timeout=timeout, sleep=nap, max_delay=self.max_delay, on_miss=on_miss)
        finally:
            if in_line:
                self._leave(path, acquired=held is not None)
        if held is None:
            holder = self._read_holder(path)
            if holder is None and path in self._yields:
                raise LockTimeout(
                    f"lock {name!r} is free but handed over to a process waiting in line; gave up after "
                    f"{float(timeout or 0.0):.2f}s. Wait longer (timeout=)",
                    name=name,
                    holder=None,
                )
            raise lock_timeout_error(name, holder, float(timeout or 0.0))
        return held

    # -- the line of waiters (see workhive_fcntl_locks.queue) ---------------------
    def _queue_dir(self, path: str) -> str:
        return queue.queue_dir_for(path, SUFFIX)

    def _join(self, path: str) -> None:
        place = self._places.get(path)
        if place is not None:
            place.waiting += 1
            return
        self._places[path] = _Place(*self._new_entry(path))

    def _keep_place(self, path: str) -> None:
        # Between naps: if our entry vanished (removed by hand, or by a workhive that misjudged it),
        # nobody can hand us a turn any more; take a new place rather than wait unseen.
        place = self._places.get(path)
        if place is None or place.entry is None or queue.present(place.entry):
            return
        self._drop_entry(place)
        place.entry, place.loop = self._new_entry(path)

    def _new_entry(self, path: str) -> tuple[queue.Entry | None, asyncio.AbstractEventLoop | None]:
        if not self._queueing:
            return None, None
        try:
            entry = queue.join(self._queue_dir(path))
        except OSError as exc:
            # Waiters still get the lock by polling, but a holder that re-acquires at
            # once may overtake them.
            if exc.errno in _NO_FIFOS:  # some network or FAT file systems: stop trying
                self._queueing = False
                logger.warning("fcntl locks in %s cannot queue waiters (%s); waiters only poll", self.directory, exc)
            else:
                logger.debug("could not join the line of %s: %s", path, exc)
            return None, None
        loop = asyncio.get_running_loop()
        try:
            loop.add_reader(entry.fd, self._on_ring, path, entry)
        except (NotImplementedError, OSError):
            return entry, None  # still in line (holders yield to us), woken by polling only
        return entry, loop

    def _drop_entry(self, place: _Place) -> None:
        entry, place.entry = place.entry, None
        if entry is None:
            return
        if place.loop is not None:
            place.loop.remove_reader(entry.fd)
        queue.leave(entry)

    def _leave(self, path: str, *, acquired: bool) -> None:
        place = self._places.get(path)
        if place is None:
            return
        place.waiting -= 1
        if place.waiting <= 0:
            del self._places[path]
            self._drop_entry(place)
        elif acquired and place.entry is not None and not queue.move_to_back(place.entry):
            # Our entry was swept meanwhile; the tasks of ours that still wait take a new place.
            self._drop_entry(place)
            place.entry, place.loop = self._new_entry(path)

    def _on_ring(self, path: str, entry: queue.Entry) -> None:
        try:
            os.read(entry.fd, 512)
        except OSError:
            pass  # nothing to read (another reader of ours took it) or closed: the wake-up is what counts
        self._wake(path)

    def _hand_over(self, path: str, token: int, streak: tuple[float, int]) -> None:
        # After a release. Once our streak of consecutive tokens has lasted
        # max_streak or STREAK_TOKENS acquisitions, wake the first other provider
        # in line and, if there is one, let it go first. Before that we may take the lock again at once (a
        # handover costs a context switch; batching keeps throughput), and the
        # line is rung only if we do not.
        if len(self._streaks) >= 1024:  # a worker usually locks a handful of names; stay bounded
            self._streaks.clear()
        if len(self._yields) >= 1024:  # forgetting a turn costs fairness once, never safety
            self._yields.clear()
        now = time.monotonic()
        start, count = streak
        if now - start >= self.max_streak or count >= STREAK_TOKENS:
            if self._ring(path):
                self._yields[path] = (token, now + self.handoff_timeout)
            else:
                start, count = now, 0  # nobody waited: a streak only counts while someone does
        elif path not in self._ring_soon:
            with contextlib.suppress(RuntimeError):  # no running loop: nothing to defer to
                asyncio.get_running_loop().call_soon(self._ring_if_free, path)
                self._ring_soon.add(path)
        self._streaks[path] = (token, start, count)

    def _ring_if_free(self, path: str) -> None:
        self._ring_soon.discard(path)
        if not any(h.path == path for h in self._held.values()):
            self._ring(path)

    def _ring(self, path: str) -> bool:
        """Wake the first other provider in line for ``path``; whether there was one."""
        place = self._places.get(path)
        mine = place.entry.name if place is not None and place.entry is not None else None
        try:
            return queue.first_other(self._queue_dir(path), mine, ring=True)
        except OSError as exc:
            logger.debug("could not ring the line of %s: %s", path, exc)
            return False

    def _yielding(self, path: str) -> bool:
        token, give_up_at = self._yields[path]
        if time.monotonic() < give_up_at and self._current_token(path) == token:
            if self._ring(path):  # again: if the one we rang died since, the next in line is woken
                return True
        del self._yields[path]  # taken over, nobody left in line, or waited long enough
        return False

    def _current_token(self, path: str) -> int | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except OSError:
            return None
        try:
            record = decode_holder(os.pread(fd, max(os.fstat(fd).st_size, 1), 0))
        except OSError:
            return None
        finally:
            os.close(fd)
        return None if record is None else int(record["token"])

    async def _nap(self, path: str, pause: float) -> None:
        # Sleep between tries, but wake at once when this provider releases the
        # lock: tasks of one process hand over without waiting out the backoff.
        # (Other processes are not told; they find out on their next try.)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        waiters = self._waiters.setdefault(path, set())
        waiters.add(future)
        try:
            await asyncio.wait_for(future, pause)
        except asyncio.TimeoutError:
            pass
        finally:
            waiters.discard(future)
            if not waiters:
                self._waiters.pop(path, None)

    def _wake(self, path: str) -> None:
        for future in self._waiters.get(path, ()):
            if not future.done():
                future.set_result(None)

    def _try_acquire(self, path: str, name: str, ttl: float | None, worker_id: str | None) -> HeldLock | None:
        for _ in range(1000):  # a file replaced 1000 times in a row means something else is wrong
            result = self._try_once(path, name, ttl, worker_id)
            if result is not _RETRY:
                return result  # type: ignore[return-value]
        raise LockSystemError(f"the lock file {path!r} keeps being replaced; is something else deleting it?", path=path)

    def _try_once(self, path: str, name: str, ttl: float | None, worker_id: str | None) -> object:
        try:
            fd = os.open(path, _OPEN_FLAGS, 0o644)
        except OSError as exc:
            if exc.errno == errno.ENOENT:  # the directory was removed: make it again
                self._dir_ready = False
                self._ensure_dir()
                return _RETRY
            raise self._error("open the lock file", path, exc) from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                return None
            st = os.fstat(fd)
            try:
                current = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            if st.st_nlink < 1 or current is None or (current.st_ino, current.st_dev) != (st.st_ino, st.st_dev):
                os.close(fd)  # cleaned (or replaced) between our open and our lock
                return _RETRY
            data = os.pread(fd, st.st_size, 0) if st.st_size else b""
            token = self._last_token(path, name, data) + 1
            now = time.time()
            record = encode_holder(
                name=name,
                token=token,
                held=True,
                pid=os.getpid(),
                host=self.host,
                worker_id=worker_id,
                acquired_at=now,
                ttl=ttl,
            )
            record = self._write(fd, record, len(data))
        except OSError as exc:
            os.close(fd)
            raise self._error("lock", path, exc) from exc
        except BaseException:
            os.close(fd)
            raise
        last = self._streaks.get(path)
        streak = (last[1], last[2] + 1) if last is not None and last[0] == token - 1 else (time.monotonic(), 1)
        handle = _Handle(self, path, fd, len(record), streak)
        self._held[id(handle)] = handle
        return HeldLock(name=name, token=token, acquired_at=now, ttl=ttl, handle=handle)

    def _last_token(self, path: str, name: str, data: bytes) -> int:
        if not data:
            return self._read_floor()  # a new (or cleaned) file starts above every cleaned token
        record = decode_holder(data)
        if record is None or record.get("name") != name:
            raise LockSystemError(
                f"the lock file {path!r} does not hold a workhive lock record for {name!r}; "
                "something else wrote to it. Remove it while no process uses the lock",
                path=path,
            )
        return int(record["token"])

    @staticmethod
    def _write(fd: int, record: bytes, old_length: int) -> bytes:
        # One pwrite of the whole record, so a reader sees the old or the new line.
        # A shorter record is padded with spaces (JSON ignores them) to cover the
        # old one: cheaper than an ftruncate on every release.
        if len(record) < old_length:
            record = record[:-1] + b" " * (old_length - len(record)) + b"\n"
        os.pwrite(fd, record, 0)
        return record

    async def release(self, lock: HeldLock) -> None:
        """Release ``lock``; ``LockNotHeld`` if it was released already or is not from this provider."""
        handle = lock.handle if isinstance(lock, HeldLock) else None
        if not isinstance(handle, _Handle) or handle.owner is not self or handle.fd < 0:
            name = lock.name if isinstance(lock, HeldLock) else lock
            raise LockNotHeld(
                f"lock {name!r} is not held by this provider (released already, or acquired elsewhere)",
                name=name,
            )
        self._release(handle, lock)

    def _release(self, handle: _Handle, lock: HeldLock) -> None:
        fd, handle.fd = handle.fd, -1
        self._held.pop(id(handle), None)
        try:
            self._write(fd, encode_holder(name=lock.name, token=lock.token, held=False), handle.length)
        except OSError as exc:
            # The lock is released by the close below either way; a stale "held"
            # record is harmless because readers confirm it with a probe.
            logger.warning("could not mark lock %r free in %s: %s", lock.name, handle.path, exc)
        finally:
            os.close(fd)
            self._wake(handle.path)
        self._hand_over(handle.path, lock.token, handle.streak)

    async def close(self) -> None:
        """Release every lock still held through this provider; it cannot be used afterwards."""
        self._closed = True
        for handle in list(self._held.values()):
            fd, handle.fd = handle.fd, -1
            os.close(fd)
            self._wake(handle.path)
        self._held.clear()
        for place in self._places.values():
            self._drop_entry(place)
        self._places.clear()
        self._yields.clear()

    # -- introspection --------------------------------------------------------
    async def holder(self, name: str) -> LockHolder | None:
        """Who holds ``name`` right now (read without taking the lock), or None."""
        return self._read_holder(self.path_for(name))

    async def list_locks(self) -> list[LockHolder]:
        """Every lock currently held in the directory, sorted by name."""
        holders = [h for h in map(self._read_holder, self._lock_files()) if h is not None]
        return sorted(holders, key=lambda h: h.name)

    def _lock_files(self, suffix: str = SUFFIX) -> list[str]:
        try:
            with os.scandir(self.directory) as entries:
                return [
                    e.path
                    for e in entries
                    if e.name.endswith(suffix) and _LOCK_STEM.fullmatch(e.name[: -len(suffix)]) is not None
                ]
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise self._error("list the lock directory", self.directory, exc) from exc

    def _read_holder(self, path: str) -> LockHolder | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error("read the lock file", path, exc) from exc
        try:
            record = None
            for _ in range(20):  # a read racing the holder's pwrite may see half a line
                data = os.pread(fd, max(os.fstat(fd).st_size, 1), 0)
                if not data:
                    return None
                record = decode_holder(data)
                if record is not None:
                    break
            if record is None:
                return None
            holder = holder_from_record(record)
            if holder is None:
                return None
            try:  # confirm the record: if a shared lock is free to take, nobody holds it
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
            except BlockingIOError:
                return holder
            return None  # its holder died without rewriting the record
        except OSError as exc:
            raise self._error("read the lock file", path, exc) from exc
        finally:
            os.close(fd)

    # -- cleaning -------------------------------------------------------------
    async def clean(self) -> list[str]:
        """Delete the files of locks nobody holds; returns their names. Held locks are untouched.

        Waiting lines lose the entries of waiters that died, and go when empty.

        Each file is unlinked only after this provider locked it and checked it
        is still the file at its path, so no holder is ever affected.
        """
        self._check_open()
        return await asyncio.to_thread(self._clean)

    def _clean(self) -> list[str]:
        cleaned = []
        for path in self._lock_files():
            name = self._clean_one(path)
            if name is not None:
                cleaned.append(name)
        for line in self._lock_files(queue.QUEUE_SUFFIX):
            try:  # entries of waiters that died; the directory itself once nobody waits
                queue.sweep(line)
            except OSError as exc:
                raise self._error("clean the waiting line", line, exc) from exc
        return sorted(cleaned)

    def _clean_one(self, path: str) -> str | None:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._error("open the lock file", path, exc) from exc
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None  # held: never touched
            st = os.fstat(fd)
            try:
                current = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                return None
            if st.st_nlink < 1 or (current.st_ino, current.st_dev) != (st.st_ino, st.st_dev):
                return None  # someone else cleaned it; the file there now is not ours to delete
            record = decode_holder(os.pread(fd, st.st_size, 0)) if st.st_size else None
            if record is not None:
                self._raise_floor(int(record["token"]))
            os.unlink(path)
            return str(record["name"]) if record is not None else os.path.basename(path)
        except OSError as exc:
            raise self._error("clean the lock file", path, exc) from exc
        finally:
            os.close(fd)

    # -- token floor ------------------------------------------------------------
    def _floor_path(self) -> str:
        return os.path.join(self.directory, FLOOR_FILE)

    def _read_floor(self) -> int:
        path = self._floor_path()
        try:
            with open(path, "rb") as f:
                text = f.read().strip()
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise self._error("read the token floor", path, exc) from exc
        try:
            return int(text or b"0")
        except ValueError:
            raise LockSystemError(
                f"the token floor {path!r} is corrupt ({text[:40]!r}); it must hold one integer. "
                "Write the highest fencing token you have seen into it",
                path=path,
            ) from None

    def _raise_floor(self, token: int) -> None:
        # Serialised by a lock on the floor's own lock file (cleaners only, which
        # run in a thread); readers never lock: the file is replaced atomically.
        path = self._floor_path()
        guard = os.open(path + ".lock", _OPEN_FLAGS, 0o644)
        try:
            fcntl.flock(guard, fcntl.LOCK_EX)
            if token <= self._read_floor():
                return
            tmp = f"{path}.{os.getpid()}.{id(self)}.tmp"
            with open(tmp, "wb") as f:
                f.write(b"%d\n" % token)
            os.replace(tmp, path)
        finally:
            os.close(guard)
