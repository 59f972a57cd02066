"""The payload envelope: headers (a trace context, a timeout) that travel with an item's data, on every engine.

An item's payload is JSON text that every backend stores as-is. When an item
carries headers, its payload is ``{"$workhive":{HEADERS},"data":DATA}``, so no
engine needs a column, a hash field or a migration for them. ``WorkItem.data``
opens the envelope; ``item.payload`` is the stored text.

A payload is an envelope exactly when its text starts with ``ENVELOPE_PREFIX``:
data that would start that way by itself (an object whose first key is
``"$workhive"``) is sealed in an envelope with no headers, so what a handler
reads is always what was pushed. Checking costs one ``str.startswith``.

>>> sealed = seal('{"n":1}', {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
>>> sealed[:33]
'{"$workhive":{"traceparent":"00-0'
>>> unseal(sealed)
{'n': 1}
>>> headers(sealed)["traceparent"][:6]
'00-0af'
>>> unseal(seal('{"$workhive":"mine"}', None))
{'$workhive': 'mine'}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["ENVELOPE_PREFIX", "TIMEOUT_HEADER", "data_text", "headers", "seal", "unseal"]

#: how every sealed payload starts (and no other payload does)
ENVELOPE_PREFIX = '{"$workhive":'
#: the header holding an item's own handler timeout in seconds (``Pool.push(..., timeout=)``)
TIMEOUT_HEADER = "timeout"
_DATA = ',"data":'
_DECODER = json.JSONDecoder()


def seal(payload: str, item_headers: Mapping[str, str] | None) -> str:
    """``payload`` (JSON text) with ``item_headers`` around it; unchanged when there is nothing to carry.

    ``item_headers`` must be text to text (a propagator's carrier); data that
    would read as an envelope is sealed with empty headers.
    """
    if not item_headers:
        if not payload.startswith(ENVELOPE_PREFIX):
            return payload
        item_headers = {}
    # Compact and ASCII, like workhive.validation.to_json: the header values are a propagator's text.
    return ENVELOPE_PREFIX + json.dumps(dict(item_headers), separators=(",", ":")) + _DATA + payload + "}"


def _open(payload: str) -> dict[str, Any]:
    envelope = json.loads(payload)
    if not isinstance(envelope, dict) or "data" not in envelope or not isinstance(envelope.get("$workhive"), dict):
        # Only workhive writes this prefix (seal escapes data that starts with it): this was written by hand.
        raise ValueError(f"payload starts like a workhive envelope but is not one: {payload[:80]!r}")
    return envelope


def unseal(payload: str) -> Any:
    """The data of ``payload``, decoded, with its envelope (if any) taken off."""
    if payload.startswith(ENVELOPE_PREFIX):
        return _open(payload)["data"]
    return json.loads(payload)


def headers(payload: str) -> dict[str, str]:
    """The headers ``payload`` carries (empty when it has none).

    Only the headers are decoded (they come first), not the data after them,
    which may be large: a worker reads them for every item it traces.
    """
    if not payload.startswith(ENVELOPE_PREFIX):
        return {}
    try:
        found, end = _DECODER.raw_decode(payload, len(ENVELOPE_PREFIX))
    except ValueError:
        found, end = None, 0
    if not isinstance(found, dict) or not payload.startswith(_DATA, end):
        found = _open(payload)["$workhive"]  # raises, saying what is wrong
    return {str(k): str(v) for k, v in found.items()}


def data_text(payload: str) -> str:
    """The JSON text of the data alone, as pushed (for display: the dashboard, ``workhive show``)."""
    if not payload.startswith(ENVELOPE_PREFIX):
        return payload
    return json.dumps(_open(payload)["data"], separators=(",", ":"), ensure_ascii=False)
