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
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import unquote, urlsplit

from workhive.urls import url_password

__all__ = [
    "REDACTED",
    "forget_secrets",
    "install_log_scrubbing",
    "register_secret",
    "register_secrets",
    "register_url_password",
    "scrub",
    "scrub_data",
]

REDACTED = "**********"

#: shorter values are not scrubbed: replacing every "ab" in every message would make output
#: unreadable, and a key that short is not a secret worth the name
MIN_SECRET_LENGTH = 4

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()  # longest first, so a secret containing another is replaced whole


def register_secret(value: str) -> None:
    """Scrub ``value`` from everything this process emits or stores (and logs) from now on."""
    global _secrets
    if not isinstance(value, str) or len(value) < MIN_SECRET_LENGTH:
        return
    with _lock:
        if value not in _secrets:
            _secrets = tuple(sorted((*_secrets, value), key=len, reverse=True))
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
    global _secrets
    with _lock:
        _secrets = ()


def scrub(text: str) -> str:
    """``text`` with every registered secret replaced by ``REDACTED``."""
    secrets = _secrets
    if not secrets or not isinstance(text, str):
        return text
    for value in secrets:
        if value in text:
            text = text.replace(value, REDACTED)
    return text


def scrub_data(data: Any) -> Any:
    """``scrub`` applied to every string (keys included) inside JSON-like ``data``."""
    if not _secrets:
        return data
    if isinstance(data, str):
        return scrub(data)
    if isinstance(data, dict):
        return {scrub_data(k): scrub_data(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return type(data)(scrub_data(v) for v in data)
    return data


def _scrub_record(record: logging.LogRecord) -> None:
    if not _secrets:
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
