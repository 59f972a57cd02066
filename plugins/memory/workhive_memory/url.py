"""The ``memory://`` URL forms: ``memory://`` is private, ``memory://NAME`` is shared within the process.

``parse_url`` reads a storage URL, ``parse_lock_url`` a lock URL;
both return the NAME (``None`` for a private store) or raise ``ConfigError``,
showing the URL only redacted.

>>> parse_url("memory://tests"), parse_lock_url("memory:tests")
('tests', 'tests')
"""

from __future__ import annotations

import re

from workhive.errors import ConfigError
from workhive.urls import redact_url

__all__ = ["parse_lock_url", "parse_url"]

_URL = re.compile(r"memory://([A-Za-z0-9][A-Za-z0-9._\-]{0,199})?")


def parse_url(url: object) -> str | None:
    """The store name in ``memory://name`` (None for a private ``memory://``), or ConfigError.

    >>> parse_url("memory://tests"), parse_url("memory://")
    ('tests', None)
    """
    match = _URL.fullmatch(url) if isinstance(url, str) else None
    if match is None:
        shown = redact_url(url)  # a URL mistyped with a user:password@ in it is never echoed whole
        raise ConfigError(
            f"memory storage URL {shown!r} is malformed: use memory:// for a private store or "
            "memory://NAME (letters, digits, . _ -) to share one store between Hives of this process; "
            "it takes no ?options",
            url=shown,
        )
    return match.group(1)


def parse_lock_url(url: object) -> str | None:
    """The lock store's name in ``memory://NAME`` or ``memory:NAME`` (None for a private ``memory://``), or ConfigError.

    >>> parse_lock_url("memory://"), parse_lock_url("memory://repo-locks")
    (None, 'repo-locks')
    """
    shown = redact_url(url)  # a URL mistyped with a user:password@ in it is never echoed whole
    if not isinstance(url, str) or not url.lower().startswith("memory:"):
        raise ConfigError(f"lock URL {shown!r} is not a memory URL: write memory:// or memory://NAME", url=shown)
    rest = url[len("memory:") :]
    name = rest[2:] if rest.startswith("//") else rest
    if "?" in name or "#" in name or "/" in name:
        raise ConfigError(
            f"lock URL {shown!r} is malformed: write memory:// or memory://NAME (no path, no options)", url=shown
        )
    return name or None
