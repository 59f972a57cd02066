"""Checks shared by the facade and every backend: names, numbers, JSON."""

from __future__ import annotations

import json
import json.encoder
import math
import re
from collections.abc import Callable
from typing import Any

from workhive.errors import InvalidArgument, InvalidItem, InvalidName

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,199}")

# One encoder for the hot path: compact separators keep stored payloads small,
# allow_nan=False refuses NaN/Infinity, which other JSON parsers reject.
_stdlib_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _make_encoder() -> Callable[[Any], str]:
    # JSONEncoder.encode builds a new C encoder on every call, which is most of the
    # cost of encoding a small payload; build it once (3-4x faster per push). No
    # circular-reference markers: a cycle ends in RecursionError, which to_json
    # reports like any other unencodable value. Where the C accelerator is absent
    # (other Pythons), the stdlib path gives the same text.
    make = getattr(json.encoder, "c_make_encoder", None)
    basestring = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or basestring is None:
        return _stdlib_encode
    encoder = make(None, _refuse, basestring, None, ":", ",", False, False, False)
    join = "".join
    return lambda value: join(encoder(value, 0))


_encode = _make_encoder()


def check_name(kind: str, name: object) -> str:
    """Return ``name`` if it is a valid pool/worker name, else raise InvalidName."""
    if not isinstance(name, str) or _NAME.fullmatch(name) is None:
        raise InvalidName(
            f"{kind} name {name!r} is not allowed: use 1-200 characters of letters, digits "
            "and . _ : - starting with a letter or digit",
            name=name,
        )
    return name


def to_json(value: Any, what: str = "item data") -> str:
    """Encode ``value`` as compact JSON text, or raise InvalidItem saying why."""
    try:
        return _encode(value)
    except (TypeError, ValueError, RecursionError) as exc:
        raise InvalidItem(
            f"{what} must be JSON-serialisable (dict, list, str, int, float, bool, None): {exc}",
            value=value,
        ) from None


def check_nonnegative(what: str, value: float) -> float:
    """Finite and >= 0, else InvalidArgument naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise InvalidArgument(f"{what} must be a finite number >= 0, got {value!r}", value=value)
    return float(value)


def check_positive(what: str, value: float) -> float:
    """Finite and > 0, else InvalidArgument naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
        raise InvalidArgument(f"{what} must be a finite number > 0, got {value!r}", value=value)
    return float(value)


def check_count(what: str, value: int, minimum: int = 1, maximum: int = 2**31 - 1) -> int:
    """An int within [minimum, maximum], else InvalidArgument naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise InvalidArgument(f"{what} must be an integer from {minimum} to {maximum}, got {value!r}", value=value)
    return value
