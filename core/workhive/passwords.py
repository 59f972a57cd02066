"""Passwords kept out of URLs, argv and ``ps``: read from a file or an environment variable.

A storage URL is shown by ``ps``, kept in shell history and written into
config files; an engine that can take its password from a file (mode 0600,
a mounted secret) or from the environment keeps it out of all three. Every
password read here is registered with ``workhive.redaction`` at once, so no
text workhive emits or stores can carry it.

>>> import os, tempfile
>>> with tempfile.NamedTemporaryFile("w", delete=False) as f:
...     _ = f.write("pa55-word\\n")
>>> read_password_file(f.name, "password_file", "Redis URL")
'pa55-word'
>>> os.unlink(f.name)
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from workhive.errors import ConfigError
from workhive.redaction import register_secret

__all__ = ["password_from_env", "read_password_file"]


def read_password_file(path: str, option: str, source: str) -> str:
    """The password in the file at ``path`` (its first line; a trailing newline is not part of it).

    ``option`` and ``source`` name where the path came from (``password_file``,
    ``Redis URL``), so that a missing, unreadable or empty file is a
    ``ConfigError`` that says which setting to fix. The password is registered
    for scrubbing before it is returned.
    """
    expanded = os.path.expanduser(path)
    try:
        with open(expanded, encoding="utf-8") as handle:
            text = handle.read()
    except FileNotFoundError:
        raise ConfigError(f"{option}={path!r} in the {source}: there is no such file") from None
    except IsADirectoryError:
        raise ConfigError(
            f"{option}={path!r} in the {source} is a directory; name the file that holds the password"
        ) from None
    except PermissionError:
        raise ConfigError(
            f"{option}={path!r} in the {source}: this process may not read it (check its owner and mode)"
        ) from None
    except UnicodeDecodeError:
        raise ConfigError(f"{option}={path!r} in the {source} is not UTF-8 text") from None
    except OSError as exc:
        raise ConfigError(f"{option}={path!r} in the {source} cannot be read ({exc.strerror})") from None
    lines = text.splitlines()
    password = lines[0] if lines else ""
    if not password:
        raise ConfigError(
            f"{option}={path!r} in the {source}: the file is empty (write the password on its first line)"
        )
    register_secret(password)
    return password


def password_from_env(names: Sequence[str], environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the first of ``names`` set (and non-empty) in the environment, registered for scrubbing."""
    env = os.environ if environ is None else environ
    for name in names:
        value = env.get(name)
        if value:
            register_secret(value)
            return value
    return None
