"""Per-item progress (``ctx.progress``): checked values, kept in the hive's shared state.

A handler reports ``ctx.progress(done, total, note)``; its worker writes the
latest value at most once per heartbeat (and the last one when the handler
ends), under the shared-state namespace ``workhive-progress`` with the key
``<pool>/<item id>``, for a week (the store's own expiry, on every engine).
``workhive show``, ``workhive status --json`` and the dashboard read it back.

>>> check_progress(3, 10, "page 3")
{'done': 3, 'total': 10, 'note': 'page 3'}
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from workhive.errors import InvalidArgument
from workhive.redaction import scrub
from workhive.validation import printable_text

if TYPE_CHECKING:
    from workhive.hive import Hive

__all__ = ["NAMESPACE", "check_progress", "read_progress", "write_progress"]

NAMESPACE = "workhive-progress"
#: how long a progress value is kept after its last write (a finished item's last value stays readable)
KEEP_SECONDS = 7 * 86400.0
MAX_NOTE_CHARS = 500


def _number(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"ctx.progress: {name} must be a finite number >= 0, got {value!r}", value=value)
    return value


def check_progress(done: object, total: object = None, note: object = None) -> dict[str, Any]:
    """The progress value to store, or ``InvalidArgument`` saying what is wrong (nothing is stored then).

    >>> check_progress(11, 10)
    Traceback (most recent call last):
    ...
    workhive.errors.InvalidArgument: ctx.progress: done (11) is more than total (10); report done <= total
    """
    value: dict[str, Any] = {"done": _number("done", done), "total": None, "note": None}
    if total is not None:
        value["total"] = _number("total", total)
        if value["done"] > value["total"]:
            raise InvalidArgument(
                f"ctx.progress: done ({done!r}) is more than total ({total!r}); report done <= total", value=done
            )
    if note is not None:
        if not isinstance(note, str):
            raise InvalidArgument(f"ctx.progress: note must be a string, got {type(note).__name__}", value=note)
        if len(note) > MAX_NOTE_CHARS:
            raise InvalidArgument(
                f"ctx.progress: note is {len(note)} characters; keep it to {MAX_NOTE_CHARS}", value=note[:50]
            )
        value["note"] = scrub(printable_text(note))  # no secret the process holds is ever stored
    return value


def _key(pool: str, item_id: str) -> str:
    return f"{pool}/{item_id}"


async def write_progress(hive: Hive, pool: str, item_id: str, token: int, value: dict[str, Any]) -> None:
    """Store ``value`` (from ``check_progress``) for claim ``token`` of ``item_id``, with the time of writing."""
    stored = dict(value, token=token, at=await hive.now())
    await hive.shared(NAMESPACE).put(_key(pool, item_id), stored, ttl=KEEP_SECONDS)


async def read_progress(hive: Hive, pool: str, item_id: str) -> dict[str, Any] | None:
    """The last progress stored for ``item_id`` (``done``, ``total``, ``note``, ``token``, ``at``), or None."""
    value = await hive.shared(NAMESPACE).get(_key(pool, item_id))
    return value if isinstance(value, dict) else None
