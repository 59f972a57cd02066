"""``fcntl:`` URLs: which directory holds the lock files.

The forms follow ``sqlite:`` URLs — what comes after ``fcntl://`` is the
path, with one leading slash dropped:

* ``fcntl:///.workhive/locks`` → ``.workhive/locks`` relative to the working
  directory (the default),
* ``fcntl:////var/lib/app/locks`` → ``/var/lib/app/locks`` (absolute),
* ``fcntl:///~/locks`` → ``~/locks`` in the home directory,
* ``fcntl://`` → the default directory.

A relative directory is resolved once, when the provider is created.
"""

from __future__ import annotations

import os

from workhive.errors import ConfigError
from workhive.urls import redact_url

__all__ = ["DEFAULT_DIRECTORY", "directory_from_url"]

DEFAULT_DIRECTORY = ".workhive/locks"

_FORMS = "write fcntl:///relative/dir, fcntl:////absolute/dir or fcntl:// (the default .workhive/locks)"


def directory_from_url(url: str) -> str:
    """The absolute lock directory an ``fcntl:`` URL names, or ``ConfigError`` explaining the forms.

    >>> directory_from_url("fcntl:////tmp/locks")
    '/tmp/locks'
    """
    shown = redact_url(url)  # a URL mistyped with a user:password@ in it is never echoed whole
    if not isinstance(url, str) or not url.lower().startswith("fcntl://"):
        raise ConfigError(f"lock URL {shown!r} is not an fcntl URL: {_FORMS}", url=shown)
    rest = url[len("fcntl://") :]
    if "?" in rest or "#" in rest:
        raise ConfigError(f"lock URL {shown!r} has options, but fcntl locks take none: {_FORMS}", url=shown)
    if rest and not rest.startswith("/"):
        raise ConfigError(f"lock URL {shown!r} names a host; fcntl locks are local to one machine: {_FORMS}", url=shown)
    path = rest[1:] or DEFAULT_DIRECTORY
    if "\x00" in path:
        raise ConfigError(f"lock URL {shown!r} contains a NUL character: {_FORMS}", url=shown)
    return os.path.abspath(os.path.expanduser(path))
