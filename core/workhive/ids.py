"""Item ids and claim receipts: the one shape every backend hands out.

An item id is ``"i"`` followed by 16 lowercase hex digits (a number from 1 to
2**63-1 the backend allocates, unique across all pools of a hive; signed 64-bit
because that is what SQLite and PostgreSQL store)::

    i000000000000002a

It is opaque to callers: never parse it, never do arithmetic with it. The
shape is fixed so that ids look alike on every backend, sort in allocation
order as strings, and are never mistaken for a number by a templating or
config layer (``"42"`` becomes ``42`` in YAML, ``"i000000000000002a"`` stays
a string).

A receipt is one claim in one string: the item id and the claim's fencing
token, ``"<item id>.<token>"``::

    i000000000000002a.3

``Pool.complete``/``fail``/``release``/``extend`` accept a receipt wherever
they accept a claimed ``WorkItem``, so a claim can cross a process, a JSON
context or an HTTP call and still be fenced.

>>> item_id(42)
'i000000000000002a'
>>> item_number("i000000000000002a")
42
>>> receipt("i000000000000002a", 3)
'i000000000000002a.3'
>>> parse_receipt("i000000000000002a.3")
('i000000000000002a', 3)
"""

from __future__ import annotations

import re

from workhive.errors import InvalidArgument

__all__ = ["ITEM_ID_PATTERN", "RECEIPT_PATTERN", "is_item_id", "item_id", "item_number", "parse_receipt", "receipt"]

#: what every item id matches, on every backend
ITEM_ID_PATTERN = re.compile(r"i[0-9a-f]{16}")
#: what every receipt matches
RECEIPT_PATTERN = re.compile(r"(i[0-9a-f]{16})\.([0-9]{1,19})")

_MAX = 2**63 - 1


def item_id(number: int) -> str:
    """The item id for a backend's sequence number ``number`` (1 to 2**63-1)."""
    if number.__class__ is not int or not 0 < number <= _MAX:
        raise InvalidArgument(f"an item number is an int from 1 to 2**63-1, got {number!r}")
    return f"i{number:016x}"


def is_item_id(value: object) -> bool:
    """Whether ``value`` is a string of the item-id shape."""
    return isinstance(value, str) and ITEM_ID_PATTERN.fullmatch(value) is not None


def item_number(value: str) -> int | None:
    """The sequence number inside an item id, or None if ``value`` is not an id a backend can have issued.

    Backends use it to turn an id back into their key; a string they never
    issued (another shape, a forged number) gives None, which they treat as
    "no such item".
    """
    if value.__class__ is not str or len(value) != 17 or ITEM_ID_PATTERN.fullmatch(value) is None:
        return None
    number = int(value[1:], 16)
    return number if 0 < number <= _MAX else None


def receipt(item: str, token: int) -> str:
    """The receipt of the claim of ``item`` that was given fencing ``token``."""
    return f"{item}.{token}"


def parse_receipt(value: object) -> tuple[str, int]:
    """Split a receipt into (item id, token); ``InvalidArgument`` says what was wrong otherwise."""
    if isinstance(value, str):
        match = RECEIPT_PATTERN.fullmatch(value)
        if match is not None:
            return match.group(1), int(match.group(2))
        if is_item_id(value):
            raise InvalidArgument(
                f"{value!r} is an item id, not a receipt: a receipt also carries the claim's fencing token "
                "(item.receipt, e.g. 'i000000000000002a.3'); pass the claimed WorkItem or its receipt"
            )
    raise InvalidArgument(
        f"expected a claimed WorkItem or a receipt string like 'i000000000000002a.3' (item id '.' token), got {value!r}"
    )
