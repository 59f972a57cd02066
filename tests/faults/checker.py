"""The end-of-scenario checks: every item accounted for, every output and stored row free of the canary.

``check_items`` reads every item straight from the store and returns one line
per problem, each naming the item, its state and the check it failed:

* every pushed item exists (none lost) and is DONE or POISONED (none PENDING or CLAIMED);
* an item marked with a poisoning fault is POISONED, with a non-empty reason (a
  ``raise`` item's names ``FaultRaised``); every other item is DONE;
* a DONE item's result carries its final fencing token and the digest of
  (id, token, data): no stale completion was accepted, no result came from elsewhere.

``canary_leaks`` looks for the canary key (by its marker, so URL-encoded and
JSON-escaped copies count) in texts and files.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import workhive
from workhive.models import ItemState, WorkItem

from .fault_handlers import POISONING, expected_result

__all__ = ["CANARY", "CANARY_MARKER", "canary_leaks", "check_items", "read_items", "stored_text"]

#: the marker survives every encoding (letters only), so finding it finds any copy of the key
CANARY_MARKER = "FAULTCANARYk3y"
#: the API key the fleets run with: its quote, slash, plus and non-ASCII letter are changed by
#: URL-encoding and JSON-escaping, so only a scrubber that knows those forms removes every copy
CANARY = f'sk-{CANARY_MARKER}-9d/+"é\\Zq7'


async def read_items(hive: workhive.Hive, pool: str) -> dict[str, WorkItem]:
    """Every item of ``pool`` by id, in every state."""
    found: dict[str, WorkItem] = {}
    p = hive.pool(pool)
    for state in ItemState:
        offset = 0
        while True:
            page = await p.items(state, limit=10_000, offset=offset)
            found.update((i.id, i) for i in page)
            if len(page) < 10_000:
                break
            offset += len(page)
    return found


def _describe(item: WorkItem) -> str:
    return (
        f"item {item.id} {item.data!r}: {item.state.value}, token {item.token}, attempts "
        f"{item.attempts}/{item.max_attempts}, error {item.error!r}"
    )


def check_items(pushed: dict[str, Any], stored: dict[str, WorkItem]) -> list[str]:
    """Problems with the items ``pushed`` (id -> data) as ``stored`` holds them; see the module docstring."""
    problems: list[str] = []
    for item_id, data in pushed.items():
        item = stored.get(item_id)
        if item is None:
            problems.append(f"[lost] item {item_id} {data!r} was pushed and is not in the store")
            continue
        fault = data.get("fault") if isinstance(data, dict) else None
        if item.state in (ItemState.PENDING, ItemState.CLAIMED):
            problems.append(f"[unsettled] {_describe(item)} (lease expires at {item.lease_expires_at})")
        elif fault in POISONING:
            if item.state is not ItemState.POISONED:
                problems.append(f"[not poisoned] {_describe(item)}: its handler {fault} on every attempt")
            elif not (item.error or "").strip():
                problems.append(f"[no reason] {_describe(item)}: poisoned without a reason")
            elif fault == "raise" and "FaultRaised" not in item.error:  # type: ignore[operator]
                problems.append(f"[wrong reason] {_describe(item)}: the reason should name FaultRaised")
        elif item.state is ItemState.POISONED:
            problems.append(f"[poisoned innocent] {_describe(item)}: its handler never fails")
        else:
            result = item.result if isinstance(item.result, dict) else {}
            if result.get("token") != item.token:
                problems.append(
                    f"[stale completion] {_describe(item)}: its result is from the claim with token "
                    f"{result.get('token')!r}, not the final one"
                )
            elif result.get("digest") != expected_result(item.id, item.token, item.data):
                problems.append(f"[foreign result] {_describe(item)}: result {item.result!r} is not this claim's")
    extra = sorted(set(stored) - set(pushed))
    if extra:
        problems.append(f"[unknown items] the store holds {len(extra)} item(s) nobody pushed: {extra[:5]}")
    return problems


def _forms(text: str) -> str | None:
    """Which copy of the canary ``text`` holds, or None."""
    if CANARY in text:
        return "the key as is"
    if CANARY_MARKER in text:
        return "an encoded copy of the key (URL-encoded, JSON-escaped or cut)"
    return None


def canary_leaks(
    texts: Iterable[tuple[str, str]], files: Callable[[], Iterable[Path]] = lambda: ()
) -> list[str]:
    """``[canary] ...`` lines for each (where, text) and each file that holds the key in any form.

    ``files`` lists the store's files. A file may go between the listing and its read (SQLite
    deletes its WAL when the last connection closes, after copying it into the database file,
    which may already have been read): then the files are listed and read again, whole, until
    one pass reads every file it listed.
    """
    leaks: list[str] = []
    for where, text in texts:
        form = _forms(text)
        if form is not None:
            at = text.find(CANARY_MARKER)
            leaks.append(f"[canary] {form} in {where}: …{text[max(0, at - 80) : at + 40]!r}…")
    for _ in range(20):
        try:
            contents = [(path, path.read_bytes()) for path in files()]
        except FileNotFoundError:
            continue
        break
    else:
        return [*leaks, "[canary] the store's files kept changing while they were read: not checked"]
    for path, raw in contents:
        if CANARY_MARKER.encode() in raw:
            leaks.append(f"[canary] the key is stored in {path.name} ({path})")
    return leaks


async def stored_text(
    hive: workhive.Hive, items: dict[str, WorkItem], pg_dsn: str | None = None, namespace: str = ""
) -> list[tuple[str, str]]:
    """Every stored row as text: items' data, results and errors, workers' details, and for
    PostgreSQL every row of every table in the hive's schema (SQLite's and Redis's files are grepped whole)."""
    texts = [
        (f"stored item {i.id} ({i.state.value})", f"{i.payload}\n{i.result_payload}\n{i.error}") for i in items.values()
    ]
    for worker in await hive.workers.list():
        texts.append((f"stored worker {worker.worker_id}", f"{worker.detail}"))
    if pg_dsn is not None:
        import asyncpg

        conn = await asyncpg.connect(pg_dsn, timeout=10)
        try:
            tables = await conn.fetch("SELECT tablename FROM pg_tables WHERE schemaname = $1", namespace)
            for row in tables:
                name = row["tablename"]
                rows = await conn.fetch(f'SELECT t::text AS line FROM "{namespace}"."{name}" t')
                texts.extend((f"stored row of {namespace}.{name}", r["line"]) for r in rows)
        finally:
            await conn.close()
    return texts
