"""One scrubber for every secret the process holds, applied wherever workhive emits or stores text.

A key leaks by many paths: an API's 401 body that echoes it, a handler
exception quoting that body, a reason passed from a worker process to the
supervisor, a log line. Rather than redact at each source, whoever comes to
hold a secret (the ``CredentialPool``, a storage URL with a password)
registers it here, and every exit point — stored item errors, events sent to
the supervisor, the fleet's report, progress, ``--json``, log records — runs
its text through ``scrub``.

>>> register_secret("sk-test-0123456789")
>>> scrub("HTTP 401: Incorrect API key provided: sk-test-0123456789")
'HTTP 401: Incorrect API key provided: **********'
>>> forget_secrets()

Each secret is matched in the forms in which it reaches text: as is,
URL-encoded (``quote`` and ``quote_plus``, either case of hex digits) and
JSON-escaped (``\\/``, ``\\"``, ``\\uXXXX`` with surrogate pairs above the
BMP, as ``json.dumps`` and other encoders write it), and any mix of these
within one occurrence. ASCII letters and digits are matched as is only: no
encoder changes them. Double encodings
(URL-encoding of URL-encoding, JSON inside JSON) and other transforms
(base64, hashes, a key split over several strings) are not recognised.
"""

from __future__ import annotations

import json
import logging
import re
import threading
from collections.abc import Iterable
from functools import lru_cache
from typing import Any
from urllib.parse import unquote, urlsplit

from workhive.urls import url_password

__all__ = [
    "REDACTED",
    "contains_secret",
    "forget_secrets",
    "install_log_scrubbing",
    "register_secret",
    "register_secrets",
    "register_url_password",
    "scrub",
    "scrub_data",
    "scrub_json",
    "scrub_value",
]

REDACTED = "**********"

#: shorter values are not scrubbed: replacing every "ab" in every message would make output
#: unreadable, and a key that short is not a secret worth the name
MIN_SECRET_LENGTH = 4

# The escapes JSON encoders write for a character besides \uXXXX (``\/`` is optional in JSON:
# Python never writes it, PHP and some Java encoders always do).
_JSON_SHORT = {'"': '\\"', "\\": "\\\\", "/": "\\/", "\b": "\\b", "\f": "\\f", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


#: characters no encoder changes (quote, quote_plus and JSON leave ASCII letters and digits alone)
_PLAIN = re.compile("[A-Za-z0-9]+")
#: the shortest run of plain characters worth testing for before the regex (see _Secret)
_ANCHOR_MIN = 3


def _hex(digits: str) -> str:
    """A pattern for hex ``digits`` in either case (encoders differ: ``%2F`` and ``%2f``)."""
    return "".join(f"[{d.lower()}{d.upper()}]" if d.isalpha() else d for d in digits)


def _char_pattern(char: str) -> str:
    """Every form one character of a secret takes in text: as is, URL-encoded, JSON-escaped."""
    if char.isascii() and char.isalnum():
        return char
    forms = [re.escape(char)]
    forms.append("".join("%" + _hex(f"{byte:02x}") for byte in char.encode("utf-8", "surrogatepass")))
    if char == " ":
        forms.append(r"\+")  # quote_plus and HTML forms
    units = char.encode("utf-16-be", "surrogatepass")
    forms.append("".join(r"\\u" + _hex(units[i : i + 2].hex()) for i in range(0, len(units), 2)))
    if char in _JSON_SHORT:
        forms.append(re.escape(_JSON_SHORT[char]))
    return "(?:" + "|".join(forms) + ")"


@lru_cache(maxsize=256)
def _secret_pattern(value: str) -> re.Pattern[str]:
    return re.compile("".join(_char_pattern(char) for char in value))


class _Secret:
    """One secret: its value, the regex for all its forms, and an anchor that rules most text out cheaply.

    The anchor is the secret's longest run of ASCII letters and digits, which every form
    contains as is: text without it cannot hold the secret, so the regex (slow: it tries
    each position) runs only on text that has it.
    """

    __slots__ = ("anchor", "pattern", "value")

    def __init__(self, value: str) -> None:
        self.value = value
        self.pattern = _secret_pattern(value)
        runs = _PLAIN.findall(value)
        longest = max(runs, key=len) if runs else ""
        self.anchor = longest if len(longest) >= _ANCHOR_MIN else None

    def may_be_in(self, text: str) -> bool:
        return self.anchor is None or self.anchor in text


class _Known:
    """The registered secrets, replaced as a whole so readers need no lock."""

    __slots__ = ("literal", "plus", "secrets")

    def __init__(self, values: tuple[str, ...]) -> None:
        self.literal = values  # longest first, so a secret containing another is replaced whole
        self.secrets = tuple(_Secret(v) for v in values)
        self.plus = any(" " in v for v in values)  # quote_plus writes a space as "+"

    def encoded(self, text: str) -> bool:
        """Whether ``text`` may hold a secret in an encoded form, and needs the regexes.

        Every encoded form has a "%" or a backslash in it (or a "+" for a space): text without
        them can hold a secret only as is, found by plain substring tests.
        """
        return "%" in text or "\\" in text or (self.plus and "+" in text)


_lock = threading.Lock()
_known = _Known(())


def register_secret(value: str) -> None:
    """Scrub ``value`` from everything this process emits or stores (and logs) from now on."""
    global _known
    if not isinstance(value, str) or len(value) < MIN_SECRET_LENGTH:
        return
    with _lock:
        if value not in _known.literal:
            _known = _Known(tuple(sorted((*_known.literal, value), key=len, reverse=True)))
    install_log_scrubbing()  # a process that holds a secret never logs it


def register_secrets(values: Iterable[str]) -> None:
    """``register_secret`` for each of ``values``."""
    for value in values:
        register_secret(value)


def register_url_password(url: str | None) -> None:
    """Register the password of a URL such as ``postgresql://user:pw@host/db``, if it has one.

    Read up to the URL's last ``@`` (``workhive.urls.url_password``), so a password written with
    raw ``@ ? # / :`` is registered whole; its percent-decoded form too, which is what a driver
    sends and may echo.
    """
    found = [url_password(url)]
    try:  # and as urlsplit reads it, which differs when an '@' follows the host
        found.append(urlsplit(url).password if isinstance(url, str) else None)
    except ValueError:
        pass
    for password in found:
        if password:
            register_secret(password)
            register_secret(unquote(password))


def forget_secrets() -> None:
    """Drop every registered secret (tests)."""
    global _known
    with _lock:
        _known = _Known(())


def scrub(text: str) -> str:
    """``text`` with every registered secret, in any of its forms, replaced by ``REDACTED``.

    >>> register_secret("sk-a+/B=0123")
    >>> scrub('key=sk-a%2B%2FB%3D0123 body={"k": "sk-a+\\\\/B=0123"}')
    'key=********** body={"k": "**********"}'
    >>> forget_secrets()
    """
    known = _known
    if not known.literal or not isinstance(text, str):
        return text
    if known.encoded(text):
        for secret in known.secrets:
            if secret.may_be_in(text):
                text = secret.pattern.sub(REDACTED, text)
        return text
    for value in known.literal:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def contains_secret(text: str) -> bool:
    """Whether ``text`` holds a registered secret in any of the forms ``scrub`` replaces."""
    known = _known
    if not known.literal or not isinstance(text, str):
        return False
    if known.encoded(text):
        for secret in known.secrets:
            if secret.may_be_in(text) and secret.pattern.search(text) is not None:
                return True
        return False
    for value in known.literal:
        if value in text:
            return True
    return False


def scrub_value(text: str, value: str) -> str:
    """``text`` with ``value`` (registered or not) replaced by ``REDACTED`` in any of its forms.

    >>> scrub_value("Bearer sk%2Dlive%2D1", "sk-live-1")
    'Bearer **********'
    """
    if not isinstance(text, str) or not value or len(value) < MIN_SECRET_LENGTH:
        return text
    return _secret_pattern(value).sub(REDACTED, text)


def _unused_key(key: str, taken: dict[Any, Any], original: dict[Any, Any]) -> str:
    # Two keys scrubbed to the same text would collapse into one entry; number the later one instead.
    n = 2
    while f"{key} ({n})" in taken or f"{key} ({n})" in original:
        n += 1
    return f"{key} ({n})"


def scrub_data(data: Any) -> Any:
    """``scrub`` applied to every string (keys included) inside JSON-like ``data``.

    The shape is kept: an object whose keys scrub to the same text keeps every
    entry, the later ones numbered (``"********** (2)"``).
    """
    if not _known.literal:
        return data
    if isinstance(data, str):
        return scrub(data)
    if isinstance(data, dict):
        out: dict[Any, Any] = {}
        for key, value in data.items():
            clean = scrub(key) if isinstance(key, str) else key
            if clean in out:
                clean = _unused_key(clean, out, data)
            out[clean] = scrub_data(value)
        return out
    if isinstance(data, (list, tuple)):
        return type(data)(scrub_data(v) for v in data)
    return data


def scrub_json(text: str) -> str:
    """Compact JSON ``text`` with every secret scrubbed from its strings; the same shape, still valid JSON.

    The text is decoded only when a secret is in it, so a clean result costs one scan.
    Secrets are replaced inside strings (object keys included), never across the
    JSON around them, so the result always parses.

    >>> register_secret("sk-live-0123")
    >>> scrub_json('{"echo":"key sk-live-0123","n":[1,2.5]}')
    '{"echo":"key **********","n":[1,2.5]}'
    >>> forget_secrets()
    """
    if not contains_secret(text):
        return text
    return json.dumps(scrub_data(json.loads(text)), separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _scrub_record(record: logging.LogRecord) -> None:
    if not _known.literal:
        return
    try:
        message = record.getMessage()
    except Exception:  # a bad format string: logging reports it itself, later
        return
    clean = scrub(message)
    if clean != message:
        record.msg, record.args = clean, None
    if record.exc_info and record.exc_info[1] is not None:
        # Formatters render exc_info lazily; render it now, scrubbed, and drop the raw one.
        record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        record.exc_info = None


_installed = False


def install_log_scrubbing() -> None:
    """Scrub every log record this process creates, whatever handler later writes it (idempotent).

    A record factory rather than a handler filter: it also covers handlers added later
    (a user's own logging set-up, pytest's capture), and records below a logger's level
    are never created, so it costs nothing for them.
    """
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        previous = logging.getLogRecordFactory()

        def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
            record = previous(*args, **kwargs)
            _scrub_record(record)
            return record

        logging.setLogRecordFactory(factory)
