"""Parsing a server's ``Retry-After`` header into seconds from now.

RFC 9110 §10.2.3 allows two forms: a number of seconds (``120``) or an
HTTP-date (``Wed, 21 Oct 2015 07:28:00 GMT``). Anything else is garbage and
parses as ``None``, so the caller falls back to its own backoff strategy
instead of trusting a value it cannot read.

Decisions, so a caller knows what it gets:

* a negative number of seconds (``-5``) is not valid delay-seconds; it reads
  as ``None`` (garbage), not as ``0``: a misbehaving server should not be able
  to make a fleet retry at once;
* an HTTP-date in the past reads as ``0.0`` (the server's "from then on" has
  already arrived);
* fractional seconds (``1.5``) are accepted, although the RFC only has
  integers: some APIs send them and rounding them away helps nobody;
* a huge value is returned as is (possibly ``math.inf`` for a number too big
  for a float); clamping is the caller's policy (the backoff strategies clamp
  to their ``max_retry_after``).

>>> parse_retry_after("120")
120.0
>>> parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0)
10.0
>>> parse_retry_after("soon") is None
True
"""

from __future__ import annotations

import math
import re
import time
from datetime import timezone

__all__ = ["parse_retry_after"]

# Digits with an optional fraction; a sign is deliberately not part of it.
_SECONDS = re.compile(r"\d+(?:\.\d+)?")
_NEGATIVE = re.compile(r"-\s*\d+(?:\.\d+)?")


def parse_retry_after(value: str | bytes | float | None, *, now: float | None = None) -> float | None:
    """Seconds to wait according to a ``Retry-After`` value, or ``None`` when absent or unreadable.

    ``now`` (seconds since the epoch, default ``time.time()``) is the reference
    for the HTTP-date form. A number (int/float) is taken as seconds already.

    >>> parse_retry_after(b" 3 ")
    3.0
    >>> parse_retry_after("-5") is None
    True
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        seconds = float(value)
        return seconds if seconds >= 0 and not math.isnan(seconds) else None
    if isinstance(value, bytes):
        try:
            value = value.decode("ascii")
        except UnicodeDecodeError:
            return None
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    if _SECONDS.fullmatch(text):
        return float(text)  # may be inf for absurdly many digits: the caller clamps
    if _NEGATIVE.fullmatch(text):
        return None
    return _from_http_date(text, time.time() if now is None else now)


def _from_http_date(text: str, now: float) -> float | None:
    # Imported here: the email package (email.utils, its date parser, calendar) is only needed
    # for the rare HTTP-date form, and this module is on every worker process's start-up path.
    from email.utils import parsedate_to_datetime

    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when is None:  # older Pythons return None instead of raising
        return None
    if when.tzinfo is None:  # "-0000" means UTC with unknown origin zone (RFC 5322)
        when = when.replace(tzinfo=timezone.utc)
    try:
        seconds = when.timestamp() - now
    except (OverflowError, OSError, ValueError):
        return None
    return max(0.0, seconds)
