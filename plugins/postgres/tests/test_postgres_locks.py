"""The PostgreSQL lock provider against the lock contract; each test gets a schema of its own, dropped afterwards."""

from __future__ import annotations

import asyncio
import pathlib

import asyncpg
import pytest
from postgres_server import schema_for, url_for

from workhive.errors import WorkhiveError
from workhive.locks import LockProvider
from workhive.testing.locks import LockContract
from workhive_postgres import PostgresLocks, parse_url


class TestPostgresLockContract(LockContract):
    persistent_tokens = True

    def make_provider(self, tmp_path: pathlib.Path) -> LockProvider:
        return PostgresLocks(url_for(schema_for(tmp_path)))


@pytest.mark.asyncio
async def test_a_waiter_whose_session_the_server_ends_gets_a_lock_error_and_the_provider_goes_on(
    tmp_path: pathlib.Path,
) -> None:
    """The server ends a session waiting in ``pg_advisory_lock`` (a network cut, an admin): asyncpg
    detaches that connection from its pool, and ending it once more must not escape as asyncpg's
    ``InterfaceError`` (it ended a fleet's supervisor, whose reaper takes a lock)."""
    url = url_for(schema_for(tmp_path))
    holder, waiter = PostgresLocks(url), PostgresLocks(url)
    try:
        held = await holder.acquire("busy", timeout=0)
        waiting = asyncio.ensure_future(waiter.acquire("busy", timeout=None))
        admin = await asyncpg.connect(**parse_url(url).connect_kwargs())
        try:
            ended = False
            for _ in range(600):  # until the waiter's session is seen waiting, then end it
                pids = await admin.fetch(
                    "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%advisory%'"
                )
                if pids:
                    for row in pids:
                        await admin.fetchval("SELECT pg_terminate_backend($1)", row[0])
                    ended = True
                    break
                await asyncio.sleep(0.05)
            assert ended, "the waiter never waited"
        finally:
            await admin.close()
        with pytest.raises(WorkhiveError):
            await waiting
        await holder.release(held)
        again = await waiter.acquire("busy", timeout=0)  # the provider still works
        await waiter.release(again)
    finally:
        await holder.close()
        await waiter.close()


@pytest.mark.asyncio
async def test_lock_statements_left_unanswered_fail_while_a_wait_for_the_lock_outlasts_command_timeout(
    tmp_path: pathlib.Path,
) -> None:
    """A stalled or half-open network must not hang a lock call forever (it froze a supervisor's
    reaper): past ``command_timeout`` it fails. The wait for a held lock is the server's to bound
    (``lock_timeout``), so it outlasts ``command_timeout``."""
    schema = schema_for(tmp_path)
    url = url_for(schema) + "&command_timeout=0.3"
    holder, waiter = PostgresLocks(url), PostgresLocks(url)
    try:
        held = await holder.acquire("slow", timeout=0)
        waiting = asyncio.ensure_future(waiter.acquire("slow", timeout=None))
        await asyncio.sleep(1.5)  # five command timeouts: the wait must still be on
        assert not waiting.done(), waiting
        await holder.release(held)
        again = await asyncio.wait_for(waiting, timeout=60)
        await waiter.release(again)
        # Now the server holds a lock statement back: another session locks the locks table.
        blocker = await asyncpg.connect(**parse_url(url).connect_kwargs())
        try:
            transaction = blocker.transaction()
            await transaction.start()
            await blocker.execute(f'LOCK TABLE "{schema}".locks IN ACCESS EXCLUSIVE MODE')
            try:
                with pytest.raises(WorkhiveError):
                    await asyncio.wait_for(waiter.acquire("other", timeout=0), timeout=120)
            finally:
                await transaction.rollback()
        finally:
            await blocker.close()
    finally:
        await holder.close()
        await waiter.close()
