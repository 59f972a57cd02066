"""Checks shared by the facade and every backend: names, numbers, JSON."""

from __future__ import annotations

import json
import json.encoder
import math
import re
import sys
from collections.abc import Callable
from typing import Any

from workhive.errors import InvalidArgument, InvalidItem, InvalidName

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:\-]{0,199}")

#: deepest nesting of lists and objects in item data or a result: any JSON reader takes it
#: back, in any process, however deep its own stack already is (Python's parser stops near 1,000)
MAX_DEPTH = 256
#: longest dedup key, in characters
MAX_DEDUP_KEY_CHARS = 1000
#: digits of the longest integer kept: Python refuses to read back longer ones by default
MAX_INT_DIGITS = 4300

# One encoder for the hot path: compact separators keep stored payloads small,
# allow_nan=False refuses NaN/Infinity, which other JSON parsers reject.
_stdlib_encode = json.JSONEncoder(separators=(",", ":"), allow_nan=False, ensure_ascii=False).encode

_SCALARS = frozenset((str, int, float, bool, type(None)))
_SURROGATE = re.compile("[\ud800-\udfff]")
_LONG_DIGITS = re.compile(f"[0-9]{{{MAX_INT_DIGITS + 1}}}")
_MAX_INT = 10**MAX_INT_DIGITS
_join = "".join
_int_digit_limit: Callable[[], int] = getattr(sys, "get_int_max_str_digits", lambda: 0)


def _refuse(value: Any) -> Any:
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def _make_encoder() -> Callable[[Any, int], Any]:
    # JSONEncoder.encode builds a new C encoder on every call, which is most of the
    # cost of encoding a small payload; build it once (3-4x faster per push). It
    # returns the text in chunks, joined by the caller (one Python call less per
    # item). No circular-reference markers: a cycle ends in RecursionError, which
    # to_json reports like any other unencodable value. Where the C accelerator is
    # absent (other Pythons), the stdlib path gives the same text in one chunk.
    make = getattr(json.encoder, "c_make_encoder", None)
    basestring = getattr(json.encoder, "c_encode_basestring", None)
    if make is None or basestring is None:
        return lambda value, _level: (_stdlib_encode(value),)
    return make(None, _refuse, basestring, None, ":", ",", False, False, False)  # type: ignore[no-any-return]


_chunks = _make_encoder()


def _encode(value: Any) -> str:
    return _join(_chunks(value, 0))


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
    """Encode ``value`` as compact JSON text, or raise InvalidItem saying what is wrong and where.

    Refused: values JSON has no form for (sets, bytes, objects, NaN, Infinity),
    object keys that are not strings (JSON would silently turn ``1`` into
    ``"1"``), nesting deeper than ``MAX_DEPTH`` levels, integers of more than
    ``MAX_INT_DIGITS`` digits, and lone surrogates (text that is not valid
    Unicode and cannot be stored as UTF-8).

    >>> to_json({"a": [1, 2.5, None]})
    '{"a":[1,2.5,null]}'
    >>> to_json({1: "a"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    workhive.errors.InvalidItem: item data must be ...: the key 1 (int) at the top level is not a string (...)
    """
    try:
        text = _join(_chunks(value, 0))
    except (TypeError, ValueError, RecursionError) as exc:
        raise _invalid(value, what, _problem(value) or _encoder_said(exc)) from None
    # The encoder lets a few problems through silently. The tests here are cheap
    # and prove them absent for the usual item (a flat object of short ASCII
    # text); anything else goes to _rarer_problem, which walks only if it must.
    if value.__class__ is dict:
        try:
            _join(value)  # TypeError unless every key is a str
        except TypeError:
            raise _invalid(value, what, _problem(value) or "an object key is not a string") from None
        nested = text.find("{", 1) >= 0
    else:
        nested = "{" in text
    if nested or len(text) > 2 * MAX_DEPTH or not text.isascii():
        problem = _rarer_problem(value, text, nested)
        if problem is not None:
            raise _invalid(value, what, problem)
    return text


def _rarer_problem(value: Any, text: str, nested: bool) -> str | None:
    """What ``to_json``'s quick tests could not rule out, decided; None if the value is fine.

    ``nested``: the text has an object inside the value (whose keys the quick
    test did not check). Each test proves its problem absent from the text or
    the value's shape; the walk that names the problem runs only if one cannot.
    """
    size = len(text)
    if (
        (nested and not _keys_are_strings(value))
        or (size > 2 * MAX_DEPTH and text.count("[") + text.count("{") > MAX_DEPTH and _too_deep(value))
        or (not text.isascii() and _SURROGATE.search(text) is not None)
        or (size > MAX_INT_DIGITS and not 0 < _int_digit_limit() <= MAX_INT_DIGITS and _LONG_DIGITS.search(text))
    ):
        return _problem(value)  # None only when a run of digits was inside a string
    return None


def check_text(what: str, value: str) -> str:
    """``value`` if it is valid Unicode (no lone surrogate), else InvalidArgument naming ``what``."""
    if not value.isascii() and (found := _SURROGATE.search(value)) is not None:
        raise InvalidArgument(
            f"{what} contains the lone surrogate {found.group()!r} at character {found.start()}: it is not "
            "valid Unicode and cannot be stored (decode bytes with errors='replace')",
            value=value,
        )
    return value


def check_dedup_key(value: object) -> str:
    """A dedup key: a non-empty string of at most 1000 characters, valid Unicode; else InvalidArgument.

    >>> check_dedup_key("doc-1")
    'doc-1'
    """
    if not isinstance(value, str) or not value or len(value) > MAX_DEDUP_KEY_CHARS:
        raise InvalidArgument(
            f"dedup_key must be a non-empty string of at most {MAX_DEDUP_KEY_CHARS} characters, got {_short(value)}",
            value=value,
        )
    return check_text("dedup_key", value)


def printable_text(text: str) -> str:
    """``text`` with every lone surrogate written as its escape (``\\ud800``), so it can be stored and printed.

    >>> printable_text("bad \\ud800 byte")
    'bad \\\\ud800 byte'
    """
    if text.isascii() or _SURROGATE.search(text) is None:
        return text
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _keys_are_strings(value: Any) -> bool:
    """Whether every object key in ``value`` is a string: the cheap walk (no paths, no depth)."""
    stack = [value]
    pop = stack.pop
    push = stack.append
    scalars = _SCALARS
    while stack:
        v = pop()
        if isinstance(v, dict):
            for key in v:
                if key.__class__ is not str and not isinstance(key, str):
                    return False
            v = v.values()
        elif not isinstance(v, (list, tuple)):
            continue
        for x in v:
            if x.__class__ not in scalars:
                push(x)
    return True


def _too_deep(value: Any) -> bool:
    """Whether lists and objects nest more than ``MAX_DEPTH`` levels (the stack holds one iterator per level)."""
    stack = [iter((value,))]
    push = stack.append
    pop = stack.pop
    scalars = _SCALARS
    while stack:
        for v in stack[-1]:
            if v.__class__ in scalars:
                continue
            if isinstance(v, dict):
                children = iter(v.values())
            elif isinstance(v, (list, tuple)):
                children = iter(v)
            else:
                continue
            if len(stack) > MAX_DEPTH:
                return True
            push(children)
            break
        else:
            pop()
    return False


def _invalid(value: Any, what: str, problem: str) -> InvalidItem:
    return InvalidItem(
        f"{what} must be JSON-serialisable (dict with str keys, list, str, int, float, bool, None): {problem}",
        value=value,
    )


def _encoder_said(exc: BaseException) -> str:
    # Reached only if the walk below found nothing the encoder did (a type it refuses that the walk accepts).
    return "it is nested too deeply" if isinstance(exc, RecursionError) else str(exc)


def _where(path: list[str | int]) -> str:
    return "".join(f"[{p}]" if isinstance(p, int) else f"[{_short(p)}]" for p in path) or "the top level"


def _short(value: Any) -> str:
    text = repr(value)  # repr escapes lone surrogates: the message itself stays printable
    return text if len(text) <= 60 else text[:50] + "…" + text[-6:]


def _as_key(key: Any) -> str:
    try:
        return f"JSON would store it as {_encode({key: 0})[1:-3]}"
    except (TypeError, ValueError):
        return "JSON has no form for it"


def _cycle_length(root: Any, path: list[str | int]) -> int | None:
    """How many steps along ``path`` from ``root`` lead back to a container already on it; None if none do."""
    seen = {id(root)}
    node = root
    for steps, step in enumerate(path, start=1):
        node = node[step]
        if id(node) in seen:
            return steps
        seen.add(id(node))
    return None


def _problem(value: Any) -> str | None:
    """The first thing in ``value`` workhive will not store, with where it is; None if nothing.

    Iterative, so no payload can exhaust the stack; it stops at ``MAX_DEPTH``,
    which is also where a value that contains itself is found out.
    """
    stack: list[tuple[Any, list[str | int]]] = [(value, [])]
    while stack:
        v, path = stack.pop()
        if isinstance(v, str):
            found = _SURROGATE.search(v)
            if found is not None:
                return (
                    f"the string at {_where(path)} contains the lone surrogate {found.group()!r}, "
                    "which is not valid Unicode and cannot be stored as UTF-8"
                )
        elif isinstance(v, bool) or v is None:
            pass
        elif isinstance(v, int):
            if not -_MAX_INT < v < _MAX_INT:
                return (
                    f"the integer at {_where(path)} has more than {MAX_INT_DIGITS} digits, "
                    "which JSON readers refuse (store it as a string)"
                )
        elif isinstance(v, float):
            if not math.isfinite(v):
                return f"{v!r} at {_where(path)} is not a JSON number (NaN and Infinity are refused)"
        elif isinstance(v, (dict, list, tuple)):
            if len(path) >= MAX_DEPTH:
                cycle = _cycle_length(value, path)
                if cycle is not None:
                    return f"it contains itself at {_where(path[:cycle])} (a cycle JSON cannot express)"
                return f"it is nested more than {MAX_DEPTH} levels deep; flatten it"
            children: list[tuple[Any, list[str | int]]] = []
            if isinstance(v, dict):
                for key, child in v.items():
                    if not isinstance(key, str):
                        kind = type(key).__name__
                        return f"the key {_short(key)} ({kind}) at {_where(path)} is not a string ({_as_key(key)})"
                    found = _SURROGATE.search(key)
                    if found is not None:
                        return (
                            f"the key {_short(key)} at {_where(path)} contains the lone surrogate "
                            f"{found.group()!r}, which is not valid Unicode and cannot be stored as UTF-8"
                        )
                    children.append((child, [*path, key]))
            else:
                children = [(child, [*path, index]) for index, child in enumerate(v)]
            stack.extend(reversed(children))
        else:
            return f"the value at {_where(path)} is a {type(v).__name__}, which JSON has no form for"
    return None


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


def check_group(group: object) -> str:
    """A group (tenant) name: the same rule as pool names, else InvalidName.

    >>> check_group("tenant-42")
    'tenant-42'
    """
    return check_name("group", group)


def check_weight(weight: float) -> float:
    """A group's weight: a finite number > 0, else InvalidArgument.

    >>> check_weight(2)
    2.0
    """
    if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight) or weight <= 0:
        raise InvalidArgument(
            f"a group's weight must be a finite number > 0 (its share of claims; the default is 1), got {weight!r}",
            value=weight,
        )
    return float(weight)


def check_limit(what: str, limit: int | None) -> int | None:
    """A limit on items in flight: None (no limit) or an int >= 1, else InvalidArgument.

    >>> check_limit("group limit", 3), check_limit("group limit", None)
    (3, None)
    """
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 2**31 - 1:
        raise InvalidArgument(
            f"{what} must be an integer from 1 to {2**31 - 1} (items in flight at once), or None for no limit, "
            f"got {limit!r}",
            value=limit,
        )
    return limit
