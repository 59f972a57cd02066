"""Buffers a claim reads and writes, for the tests of where claims start (claim marks, group marks)."""

from __future__ import annotations

import json
from typing import Any


async def claim_buffers(conn: Any, text: str, *args: Any, marks: str, from_the_bottom: bool) -> int:
    """Shared buffers one claim of one item (statement ``text`` with ``args``) reads and writes, as
    EXPLAIN (ANALYZE, BUFFERS) counts them (a function's statements included), rolled back.

    ``from_the_bottom``: with table ``marks`` emptied first, in the same transaction, so the
    claim reads each range from its first entry, as claims did before marks.
    """
    transaction = conn.transaction()
    await transaction.start()
    try:
        if from_the_bottom:
            await conn.execute(f"DELETE FROM {marks}")
        found = await conn.fetchval("EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + text, *args)
        plan = (json.loads(found) if isinstance(found, str) else found)[0]["Plan"]
        assert plan["Actual Rows"] == 1, plan  # it claimed one item
        return int(plan["Shared Hit Blocks"]) + int(plan["Shared Read Blocks"])
    finally:
        await transaction.rollback()
