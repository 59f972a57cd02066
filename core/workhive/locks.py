"""The lock contract: named locks with fencing tokens.

``async with hive.lock("repo:acme", ttl=300) as lock:`` serialises work on a
shared resource across worker processes; ``lock.token`` rises with every
acquisition of the name, so the resource can refuse a stale holder's writes.

What every provider promises (``workhive.testing.locks.LockContract`` checks it):

* **Names.** Any non-empty ``str`` is a lock name: slashes, ``..``, NUL,
  unicode (even lone surrogates), 10 KB of text. A provider never lets a name
  become a path or key outside its own area, and two different names are two
  different locks. ``""`` and non-strings raise ``InvalidName``.
* **Acquire.** ``acquire(name, ttl=, timeout=, worker_id=)`` returns a
  ``HeldLock``. ``timeout=None`` waits forever, ``0`` tries once, ``t`` waits
  up to ``t`` seconds; giving up raises ``LockTimeout`` whose message and
  ``holder`` attribute name the current holder (pid, host, worker). Waiting
  never blocks the event loop. Errors of the lock mechanism itself
  (permissions, read-only file system…) raise ``LockSystemError``; they are
  never reported as "held by someone else".
* **Release.** ``release(held)`` frees it; releasing twice, or a lock this
  provider did not hand out, raises ``LockNotHeld``.
* **Fencing token.** Strictly greater than every token handed out before for
  the same name (providers with ``persistent_tokens`` keep this across
  restarts of the process).
* **ttl** is advisory: a holder past it is *reported* (``LockHolder.overdue``,
  a warning on the ``workhive.locks`` logger, ``workhive locks``) and never
  broken; a crashed holder's lock is freed by the provider (the kernel, for
  fcntl locks).
* **Introspection.** ``holder(name)`` and ``list_locks()`` read holder info
  without taking the lock.

The helpers below (name checks, file names for names, holder records, the
jittered wait loop) are shared by the providers in this repository and are
free to use for third-party ones.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs

from workhive.errors import InvalidArgument, InvalidName, LockTimeout

__all__ = [
    "HeldLock",
    "LockHolder",
    "LockProvider",
    "check_lock_args",
    "check_lock_name",
    "decode_holder",
    "encode_holder",
    "lock_file_name",
    "lock_timeout_error",
    "poll_until",
    "report_overdue",
]

logger = logging.getLogger("workhive.locks")

T = TypeVar("T")


@attrs.frozen
class LockHolder:
    """Who holds a lock, as waiters and ``workhive locks`` see it.

    >>> h = LockHolder("repo", token=3, pid=42, host="box", worker_id=None, acquired_at=100.0, ttl=10.0)
    >>> h.overdue(now=111.0)
    True
    """

    name: str
    token: int
    pid: int
    host: str
    worker_id: str | None
    acquired_at: float
    ttl: float | None

    def overdue(self, now: float) -> bool:
        """True when the holder is past its ttl (it is reported, never broken)."""
        return self.ttl is not None and now > self.acquired_at + self.ttl

    def age(self, now: float) -> float:
        """Seconds the lock has been held at ``now`` (never negative)."""
        return max(0.0, now - self.acquired_at)

    def describe(self, now: float | None = None) -> str:
        """One line for messages: ``pid 42 on box (worker w1, token 3, held 2.0s, ttl 10s)``."""
        now = time.time() if now is None else now
        parts = [f"worker {self.worker_id}"] if self.worker_id else []
        parts += [f"token {self.token}", f"held {self.age(now):.1f}s"]
        if self.ttl is not None:
            parts.append(f"ttl {self.ttl:g}s" + (", OVERDUE" if self.overdue(now) else ""))
        return f"pid {self.pid} on {self.host} ({', '.join(parts)})"

    def to_json(self, now: float | None = None) -> dict[str, Any]:
        """A JSON-ready dict, with ``age`` and ``overdue`` computed at ``now``."""
        now = time.time() if now is None else now
        return {
            "name": self.name,
            "token": self.token,
            "pid": self.pid,
            "host": self.host,
            "worker_id": self.worker_id,
            "acquired_at": self.acquired_at,
            "ttl": self.ttl,
            "age": self.age(now),
            "overdue": self.overdue(now),
        }


@attrs.frozen
class HeldLock:
    """A lock the caller holds; pass it back to ``release``.

    ``token`` is the fencing token: hand it to the protected resource, which
    refuses writes carrying a token lower than the highest it has seen.
    """

    name: str
    token: int
    acquired_at: float
    ttl: float | None
    handle: object = attrs.field(default=None, repr=False, eq=False)


@runtime_checkable
class LockProvider(Protocol):
    """What a ``workhive_locks`` factory returns (semantics in this module's docstring).

    >>> async def main(provider: LockProvider):  # doctest: +SKIP
    ...     held = await provider.acquire("repo:acme", ttl=60, timeout=5, worker_id="w1")
    ...     try:
    ...         write_with_fence(held.token)
    ...     finally:
    ...         await provider.release(held)
    """

    async def acquire(
        self, name: str, *, ttl: float | None, timeout: float | None, worker_id: str | None
    ) -> HeldLock: ...

    async def release(self, lock: HeldLock) -> None: ...

    async def holder(self, name: str) -> LockHolder | None: ...

    async def list_locks(self) -> list[LockHolder]: ...

    async def close(self) -> None: ...


# -- argument checks ----------------------------------------------------------
def check_lock_name(name: object) -> str:
    """Return ``name`` if it can name a lock (any non-empty ``str``), else raise ``InvalidName``.

    >>> check_lock_name("../../etc/passwd")
    '../../etc/passwd'
    """
    if not isinstance(name, str) or not name:
        raise InvalidName(
            f"lock name {name!r} is not allowed: give a non-empty string (any text works, it never becomes a path)",
            name=name,
        )
    return name


def check_lock_args(name: object, ttl: object, timeout: object, worker_id: object = None) -> str:
    """Validate ``acquire``'s arguments before anything is touched; returns the name."""
    check_lock_name(name)
    if worker_id is not None and not isinstance(worker_id, str):
        raise InvalidArgument(f"worker_id must be a string or None, got {worker_id!r}", value=worker_id)
    for what, value in (("ttl", ttl), ("timeout", timeout)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise InvalidArgument(f"lock {what} must be a finite number of seconds or None, got {value!r}", value=value)
        if value < 0 or (what == "ttl" and value == 0):
            bound = "> 0" if what == "ttl" else ">= 0"
            raise InvalidArgument(f"lock {what} must be {bound} seconds, got {value!r}", value=value)
    return name  # type: ignore[return-value]


# -- names to files -----------------------------------------------------------
_UNSAFE = re.compile(r"[^A-Za-z0-9_.\-]+")
SLUG_LENGTH = 40


def lock_file_name(name: str, suffix: str = ".lock") -> str:
    """A file name for lock ``name``: a readable slug plus the SHA-256 of the whole name.

    The slug keeps only ``[A-Za-z0-9_.-]`` (no leading dot) so the result is
    one plain path component; the hash keeps different names apart (two names
    that slug alike, or differ only in case, still get different files).

    >>> lock_file_name("repo/acme")[:10]
    'repo_acme-'
    >>> lock_file_name("../x").startswith("_x-")
    True
    """
    slug = _UNSAFE.sub("_", name[: SLUG_LENGTH * 4])[:SLUG_LENGTH].lstrip(".") or "lock"
    digest = hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()
    return f"{slug}-{digest}{suffix}"


# -- holder records -----------------------------------------------------------
# One encoder instance: a lock record is written twice per acquisition.
_encode_record = json.JSONEncoder(ensure_ascii=True, separators=(",", ":")).encode


def encode_holder(
    *,
    name: str,
    token: int,
    held: bool,
    pid: int | None = None,
    host: str | None = None,
    worker_id: str | None = None,
    acquired_at: float | None = None,
    ttl: float | None = None,
) -> bytes:
    """One newline-terminated JSON record (ASCII, so any name survives) describing a lock's state.

    >>> decode_holder(encode_holder(name="n", token=2, held=False))
    {'v': 1, 'name': 'n', 'token': 2, 'held': False}
    """
    record: dict[str, Any] = {"v": 1, "name": name, "token": token, "held": held}
    if held:
        record.update(pid=pid, host=host, worker_id=worker_id, acquired_at=acquired_at, ttl=ttl)
    return _encode_record(record).encode("ascii") + b"\n"


def decode_holder(data: bytes) -> dict[str, Any] | None:
    """The record at the start of ``data``, or None when it is empty or incomplete (being written)."""
    line, newline, _ = data.partition(b"\n")
    if not newline:
        return None
    try:
        record = json.loads(line)
    except ValueError:
        return None
    if not isinstance(record, dict) or not isinstance(record.get("token"), int):
        return None
    return record


def holder_from_record(record: dict[str, Any]) -> LockHolder | None:
    """A ``LockHolder`` from a decoded record, or None if the record says the lock is free."""
    if not record.get("held"):
        return None
    return LockHolder(
        name=record["name"],
        token=record["token"],
        pid=int(record.get("pid") or 0),
        host=str(record.get("host") or "?"),
        worker_id=record.get("worker_id"),
        acquired_at=float(record.get("acquired_at") or 0.0),
        ttl=record.get("ttl"),
    )


# -- waiting ------------------------------------------------------------------
async def poll_until(
    attempt: Callable[[], T | None],
    *,
    timeout: float | None,
    sleep: Callable[[float], Awaitable[Any]],
    clock: Callable[[], float] = time.monotonic,
    first_delay: float = 0.0005,
    max_delay: float = 0.05,
    on_miss: Callable[[float], None] | None = None,
    rng: random.Random | None = None,
) -> T | None:
    """Call ``attempt()`` until it returns a value; None when ``timeout`` ran out.

    Between tries it awaits ``sleep(delay)`` with the delay doubling from
    ``first_delay`` up to ``max_delay``, each one jittered to 50-100 % so a
    crowd of waiters does not retry in lockstep. ``timeout=0`` tries once;
    ``None`` waits forever. The last try happens at the deadline, so a lock
    freed while sleeping is still taken. ``on_miss(waited)`` runs after every
    failed try (for overdue reports).

    >>> import asyncio
    >>> asyncio.run(poll_until(lambda: 42, timeout=0, sleep=asyncio.sleep))
    42
    """
    rand = rng or random
    start = clock()
    deadline = None if timeout is None else start + timeout
    delay = first_delay
    while True:
        result = attempt()
        if result is not None:
            return result
        now = clock()
        if on_miss is not None:
            on_miss(now - start)
        if deadline is not None and now >= deadline:
            return None
        pause = delay * (0.5 + 0.5 * rand.random())
        if deadline is not None:
            pause = min(pause, deadline - now)
        await sleep(pause)
        delay = min(max_delay, delay * 2)


def report_overdue(holder: LockHolder, now: float | None = None) -> None:
    """Log a warning that ``holder`` is past its ttl (it is not broken; the kernel frees dead holders)."""
    now = time.time() if now is None else now
    logger.warning(
        "lock %r is held past its ttl by %s; it is not broken: stop that process if it hangs",
        holder.name,
        holder.describe(now),
    )


def lock_timeout_error(name: str, holder: LockHolder | None, waited: float) -> LockTimeout:
    """The ``LockTimeout`` for a waiter that gave up, naming the holder when it is known."""
    who = holder.describe() if holder is not None else "another holder (its details are being written)"
    return LockTimeout(
        f"lock {name!r} is held by {who}; gave up after {waited:.2f}s. "
        "Wait longer (timeout=), or check `workhive locks` for a stuck holder",
        name=name,
        holder=holder,
    )
