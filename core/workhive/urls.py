"""Parsing of storage/lock URLs and strategy specs (``full-jitter?base=0.5``), and showing URLs safely.

Every URL parser in workhive and its plugins reads options through
``url_query`` (or ``parse_options``), so an option given twice is refused the
same way everywhere, and shows URLs only through ``redact_url``, so no
password — however it is written — reaches a message, a log line or the CLI.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import TypeVar, cast
from urllib.parse import parse_qsl, urlsplit

from workhive.errors import ConfigError

__all__ = [
    "check_userinfo",
    "parse_options",
    "parse_spec",
    "redact_url",
    "scheme_of",
    "url_password",
    "url_query",
]

_SCHEME = re.compile(r"[a-z][a-z0-9+.\-_]*")


def scheme_of(url: object, what: str = "storage URL") -> str:
    """The scheme of ``url`` (``sqlite:///x.db`` → ``sqlite``), or ConfigError explaining the form.

    >>> scheme_of("sqlite:///.workhive/hive.db")
    'sqlite'
    """
    if not isinstance(url, str) or ":" not in url:
        shown = redact_url(url)
        raise ConfigError(
            f"{what} {shown!r} has no scheme: write it as scheme://…, e.g. sqlite:///.workhive/hive.db or memory://",
            url=shown,
        )
    scheme = url.split(":", 1)[0].lower()
    if not _SCHEME.fullmatch(scheme):
        shown = redact_url(url)
        # The "scheme" of a scheme-less user:password@host is the user name, never the password.
        raise ConfigError(f"{what} {shown!r} has an invalid scheme {scheme!r}", url=shown)
    return scheme


def parse_options(pairs: Iterable[tuple[str, str]], what: str, **context: object) -> dict[str, str]:
    """``pairs`` (option name, value) as a dict; an option given twice is a ConfigError naming it.

    The last value silently winning would hide a typo or a pasted fragment (``?schema=a&schema=b``
    opening schema b), so no URL or spec may give an option twice. ``what`` names the URL or spec
    in the message, already redacted; ``context`` becomes the error's attributes (``url=…``).

    >>> parse_options([("base", "0.5"), ("cap", "60")], "backoff strategy 'full-jitter?…'")
    {'base': '0.5', 'cap': '60'}
    """
    options: dict[str, str] = {}
    for name, value in pairs:
        if name in options:
            # Values are left out: a repeated ?password= must not be shown either.
            raise ConfigError(f"{what} gives {name!r} twice: give each option once", option=name, **context)
        options[name] = value
    return options


def parse_spec(spec: object, what: str = "backoff strategy") -> tuple[str, dict[str, str]]:
    """Split ``name?key=value&…`` into the name and its parameters (each given once).

    >>> parse_spec("full-jitter?base=0.5&cap=60")
    ('full-jitter', {'base': '0.5', 'cap': '60'})
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ConfigError(f"{what} {spec!r} is empty: give a name such as full-jitter", spec=spec)
    name, _, query = spec.strip().partition("?")
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigError(
            f"{what} {spec!r} has malformed parameters: write name?key=value&key=value", spec=spec
        ) from None
    return name, parse_options(pairs, f"{what} {spec!r}", spec=spec)


def url_query(url: str, what: str = "URL") -> dict[str, str]:
    """The query parameters of ``url`` as a dict; ConfigError if malformed or an option is given twice.

    ``what`` names the kind of URL in messages (``"Redis URL"``); the URL itself is shown redacted.

    >>> url_query("redis://h:6379/0?prefix=a&retry_for=5")
    {'prefix': 'a', 'retry_for': '5'}
    """
    shown = redact_url(url)
    query = urlsplit(url).query
    try:
        pairs = parse_qsl(query, keep_blank_values=True, strict_parsing=bool(query))
    except ValueError:
        raise ConfigError(
            f"{what} {shown!r} has a malformed query string: write ?key=value&key=value", url=shown
        ) from None
    return parse_options(pairs, f"{what} {shown!r}", url=shown)


# -- user names and passwords ----------------------------------------------------------
_T = TypeVar("_T")
_SECRET_PARAMS = frozenset(
    {
        "password",
        "passwd",
        "pass",
        "token",
        "secret",
        "key",
        "api_key",
        "apikey",
        "sslpassword",
        "ssl_password",
        "sentinel_password",
    }
)
_AUTHORITY_START = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.\-_]*://")
#: characters that end the host part of a URL: in a password they make urlsplit (and every
#: driver) read part of the password as the host, port or path
_ENDS_AUTHORITY = "/?#"


def _userinfo(url: str) -> tuple[int, int] | None:
    """Where the user info is — between the scheme's ``//`` and the LAST ``@`` — if it may hold a password.

    The last ``@``, not the end of the host as urlsplit finds it: a password written with a raw
    ``@ ? # /`` or ``:`` still lies wholly before the last ``@``. A URL with no ``scheme://`` is read
    from its start (``user:pw@host``). Text without ``:`` is a bare user name or, after an empty
    host, a path (``sqlite:///a@b.db``): no password, left alone — unless it holds ``/ ? #``
    without starting with ``/`` (``redis://pa/ss@host``), which is read as one. What is masked may
    cover more than the user info (an ``@`` in a query): that only ever hides more, never less.
    """
    head = _AUTHORITY_START.match(url)
    start = head.end() if head else 0
    end = url.rfind("@")
    if end < start:
        return None
    span = url[start:end]
    if ":" not in span and (span.startswith("/") or not any(c in span for c in _ENDS_AUTHORITY)):
        return None  # a bare user name, or a path after an empty host (sqlite:///a@b.db): no password
    return start, end


def redact_url(url: _T) -> _T:
    """``url`` safe to print: a password in it (``user:pw@host``) or in a secret-looking query
    parameter (``?password=…``) is replaced by ``***``; everything else (and a value that is
    not a string) is kept as written. Every place that shows a storage or lock URL to a person
    (``workhive config``, ``status``, error messages, the dashboard) passes it through here.

    A password written with raw reserved characters (``u:p@ss/w?rd#@host``) is masked whole:
    everything up to the last ``@`` goes, so no fragment of it is shown.

    >>> redact_url("postgresql://app:s3cret@db:5432/jobs?schema=w&password=x")
    'postgresql://app:***@db:5432/jobs?schema=w&password=***'
    >>> redact_url("redis://app:p@ss/w?rd@cache:6379/0")
    'redis://app:***@cache:6379/0'
    >>> redact_url("sqlite:///.workhive/hive.db")
    'sqlite:///.workhive/hive.db'
    """
    if not isinstance(url, str):
        return url
    text: str = url
    where = _userinfo(url)
    if where is not None:
        start, end = where
        user, colon, _ = url[start:end].partition(":")
        # Keep a user name only when it cannot be a piece of something else.
        keep = user if colon and not any(c in user for c in "@" + _ENDS_AUTHORITY) else None
        text = url[:start] + ("***" if keep is None else f"{keep}:***") + url[end:]
    base, sep, rest = text.partition("?")
    if not sep:
        return cast(_T, text)
    # The fragment is not split off first: a '#' written raw in a ?password= value is part of
    # the value, and showing what follows it would show the tail of the password.
    pairs = []
    for piece in rest.split("&"):
        key, eq, _ = piece.partition("=")
        pairs.append(f"{key}=***" if eq and key.lower() in _SECRET_PARAMS else piece)
    return cast(_T, f"{base}?{'&'.join(pairs)}")


def url_password(url: object) -> str | None:
    """The password of ``url`` as written (``user:pw@host`` → ``pw``), however odd its characters; else None.

    What the secret scrubber registers, so that a driver's message that echoes it is cleaned too.

    >>> url_password("redis://:p@ss/w?rd@cache:6379/0")
    'p@ss/w?rd'
    >>> url_password("postgresql://app@db/jobs") is None
    True
    """
    if not isinstance(url, str):
        return None
    where = _userinfo(url)
    if where is None:
        return None
    _, colon, password = url[where[0] : where[1]].partition(":")
    return password if colon else None


def check_userinfo(url: str, what: str = "URL") -> None:
    """ConfigError if ``url``'s user name or password holds a raw ``/``, ``?`` or ``#``.

    urlsplit — and every driver — ends the host at the first of those, so such a password
    would be read as a host, port or path (``redis://u:1234/x@cache`` connects to host ``u``,
    port 1234). The message shows the URL redacted and says how to write it.

    >>> check_userinfo("redis://u:p%2Fw@cache:6379/0")
    """
    where = _userinfo(url)
    if where is None:
        return
    if not any(c in url[where[0] : where[1]] for c in _ENDS_AUTHORITY):
        return
    shown = redact_url(url)
    raise ConfigError(
        f"{what} {shown!r} cannot be read: its user name or password holds a raw '/', '?' or '#' (or an '@' "
        "comes after the host). Percent-encode these characters in the password and options: "
        "/ as %2F, ? as %3F, # as %23, @ as %40, : as %3A",
        url=shown,
    )
