"""``RedisLocks``: fleet-wide named locks on Redis, with fencing tokens.

* One holder at a time: ``lock_acquire-3.lua`` takes a free lock and hands out
  a token from ``INCR`` (one counter per prefix, so a token is above every
  token handed out before, for any name, for as long as the server keeps its data).
* A live holder is never broken: the lock's key expires after a liveness
  window (``?lease=``, default 10 s) that this provider renews every third
  of it while it holds the lock. A holder that dies (SIGKILL, a lost machine)
  stops renewing, and its lock frees itself after at most that window.
  ``ttl`` stays advisory, as the lock contract says: a holder past it is
  reported (``workhive locks``, a warning), not broken.
* Release is checked in Lua: only the acquisition that took the lock (a
  random owner id kept in the ``HeldLock``) can free it.
* Waiters block on pub/sub: a release publishes the lock's member and wakes
  them; a lock whose holder died has no release, so a waiter also wakes
  when the key's remaining lifetime (``PTTL``) runs out. Nobody polls.
* Any string is a lock name: the key holds its SHA-256, the record its JSON text.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import socket
import time
import uuid
from typing import Any

from workhive.errors import LockNotHeld, LockSystemError, StorageError
from workhive.locks import HeldLock, LockHolder, check_lock_args, check_lock_name, lock_timeout_error, report_overdue
from workhive_redis.cluster import client_for
from workhive_redis.keys import HiveKeys
from workhive_redis.url import RedisConfig, parse_url
from workhive_redis.wakeups import Wakeups

__all__ = ["RedisLocks"]

log = logging.getLogger("workhive.locks")


def _member(name: str) -> str:
    return hashlib.sha256(name.encode("utf-8", "surrogatepass")).hexdigest()


def _holder(record: dict[str, Any]) -> LockHolder:
    ttl = record.get("ttl") or None
    return LockHolder(
        name=json.loads(record["n"]),
        token=int(record["t"]),
        pid=int(record["p"]),
        host=record["h"],
        worker_id=json.loads(record["w"]),
        acquired_at=float(record["a"]),
        ttl=None if ttl is None else float(ttl),
    )


class RedisLocks:
    """Locks shared by every process that uses the same server and prefix.

    >>> async def main():  # doctest: +SKIP
    ...     locks = RedisLocks("redis://127.0.0.1:6379/0")
    ...     held = await locks.acquire("repo:acme", ttl=60, timeout=5, worker_id="w1")
    ...     await locks.release(held)
    """

    #: tokens continue across providers and restarts (as long as Redis keeps its data)
    persistent_tokens = True

    def __init__(self, url: str) -> None:
        self.config: RedisConfig = parse_url(url)
        self.keys = HiveKeys(self.config.prefix)
        self._client = client_for(self.config)
        self._wakeups = Wakeups(self._client)
        self._held: dict[str, tuple[str, str]] = {}  # owner -> (name, member)
        self._keepalive: asyncio.Task[None] | None = None
        self._opened = False
        self._closed = False
        self._host = socket.gethostname()
        self._liveness_ms = max(50, int(self.config.lease * 1000))

    def __repr__(self) -> str:
        return f"RedisLocks({self.config.display!r}, prefix={self.config.prefix!r})"

    async def _open(self) -> None:
        if self._closed:
            raise LockSystemError(f"{self!r} is closed; create a new provider")
        if not self._opened:
            try:
                await self._client.open(retry_for=min(self.config.retry_for, 5.0))
            except StorageError as exc:
                raise LockSystemError(f"fleet-wide locks: {exc}") from None
            self._opened = True

    async def _run(self, name: str, keys: tuple[str, ...], args: tuple[Any, ...], *, write: bool = True) -> Any:
        try:
            return await self._client.run(name, keys, args, write=write)
        except StorageError as exc:
            raise LockSystemError(f"fleet-wide locks: {exc}") from None

    # -- acquire / release ------------------------------------------------------
    async def acquire(
        self, name: str, *, ttl: float | None = None, timeout: float | None = None, worker_id: str | None = None
    ) -> HeldLock:
        """Take lock ``name``; ``timeout=None`` waits forever, ``0`` tries once (``LockTimeout`` names the holder)."""
        check_lock_args(name, ttl, timeout, worker_id)
        await self._open()
        ttl_f = None if ttl is None else float(ttl)
        member = _member(name)
        channel = self.keys.lock_freed
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = None if timeout is None else started + timeout
        reported = False
        while True:
            future = self._wakeups.register(channel, member)
            try:
                if timeout != 0:
                    with contextlib.suppress(Exception):
                        # Bounded: a subscription never confirmed must not hold the waiter; without
                        # it the loop below still wakes when the holder's key ends.
                        await asyncio.wait_for(self._wakeups.subscribe(channel), self.config.lease)
                got, detail = await self._try(name, member, ttl_f, worker_id)
                if got:
                    return detail  # type: ignore[no-any-return]
                holder = await self.holder(name)
                if holder is not None and not reported and holder.overdue(time.time()):
                    reported = True
                    report_overdue(holder)
                now = loop.time()
                if deadline is not None and now >= deadline:
                    raise lock_timeout_error(name, holder, now - started)
                # The holder's key ends by itself if it dies: wake then at the latest.
                wait = max(0.001, int(detail) / 1000) if int(detail) > 0 else 0.001
                if deadline is not None:
                    wait = min(wait, deadline - now)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(asyncio.shield(future), wait)
            finally:
                self._wakeups.unregister(channel, member, future)

    async def _try(self, name: str, member: str, ttl: float | None, worker_id: str | None) -> tuple[bool, Any]:
        owner = uuid.uuid4().hex
        keys = (self.keys.lock(member), self.keys.lock_token, self.keys.locks)
        args = (
            owner,
            self._liveness_ms,
            member,
            json.dumps(name),
            os.getpid(),
            self._host,
            json.dumps(worker_id),
            "" if ttl is None else repr(ttl),
        )
        call = asyncio.ensure_future(self._run("lock_acquire", keys, args))
        try:
            reply = await asyncio.shield(call)
        except asyncio.CancelledError:
            # Cancelled while the script was in flight: it may have taken the lock. Finish
            # the call and give back what it took, so a cancelled waiter leaves nothing held.
            with contextlib.suppress(Exception):
                late = await call
                if late[0] == 1:
                    await self._run("lock_release", (keys[0], keys[2]), (owner, member, self.keys.lock_freed))
            raise
        if reply[0] != 1:
            return False, reply[1]
        self._held[owner] = (name, member)
        self._start_keepalive()
        return True, HeldLock(name=name, token=int(reply[1]), acquired_at=float(reply[2]), ttl=ttl, handle=owner)

    async def release(self, lock: HeldLock) -> None:
        """Release ``lock``; ``LockNotHeld`` if it was released already, lapsed, or is not from this provider."""
        owner = lock.handle if isinstance(lock, HeldLock) else None
        name = lock.name if isinstance(lock, HeldLock) else lock
        entry = self._held.pop(owner, None) if isinstance(owner, str) else None
        if entry is None:
            raise LockNotHeld(
                f"lock {name!r} is not held by this provider (released already, or acquired elsewhere)", name=name
            )
        member = entry[1]
        released = await self._run(
            "lock_release", (self.keys.lock(member), self.keys.locks), (owner, member, self.keys.lock_freed)
        )
        if released != 1:
            raise LockNotHeld(
                f"lock {name!r} lapsed before it was released: this process did not renew it within "
                f"{self.config.lease:g}s (frozen, or cut off from Redis), so another holder may have taken it",
                name=name,
            )

    # -- keeping held locks alive -------------------------------------------------
    def _start_keepalive(self) -> None:
        if self._keepalive is None or self._keepalive.done():
            self._keepalive = asyncio.get_running_loop().create_task(self._renew())

    async def _renew(self) -> None:
        pause = self._liveness_ms / 3000
        while self._held:
            await asyncio.sleep(pause)
            for owner, (name, member) in list(self._held.items()):
                try:
                    kept = await self._run("lock_renew", (self.keys.lock(member),), (owner, self._liveness_ms))
                except LockSystemError as exc:
                    log.warning("could not renew lock %r: %s", name, exc)
                    continue
                if kept != 1 and owner in self._held:
                    log.warning(
                        "lock %r lapsed: it was not renewed within %gs, so another process may hold it now",
                        name,
                        self.config.lease,
                    )

    # -- introspection ------------------------------------------------------------
    async def holder(self, name: str) -> LockHolder | None:
        """Who holds ``name`` right now, or None."""
        check_lock_name(name)
        await self._open()
        try:
            record = await self._client.command("HGETALL", self.keys.lock(_member(name)))
        except StorageError as exc:
            raise LockSystemError(f"fleet-wide locks: {exc}") from None
        return _holder(record) if record else None

    async def list_locks(self) -> list[LockHolder]:
        """Every lock currently held under this prefix, sorted by name."""
        await self._open()
        records = await self._run("lock_list", (self.keys.locks,), (self.keys.lock_prefix,))
        holders = [_holder(dict(zip(r[::2], r[1::2]))) for r in records]
        return sorted(holders, key=lambda h: h.name)

    async def close(self) -> None:
        """Release every lock still held through this provider; it cannot be used afterwards."""
        if self._closed:
            return
        keepalive, self._keepalive = self._keepalive, None
        if keepalive is not None:
            keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await keepalive
        if self._opened:
            for owner, (name, _member) in list(self._held.items()):
                with contextlib.suppress(Exception):
                    await self.release(HeldLock(name=name, token=0, acquired_at=0.0, ttl=None, handle=owner))
            await self._wakeups.close()
            await self._client.close()
        self._held.clear()
        self._closed = True
