"""TLS and password files for PostgreSQL, read as libpq reads them, checked before any connection.

``sslmode`` follows libpq: ``require`` encrypts without checking the server
(unless ``sslrootcert`` is given: then it checks the CA, as libpq does),
``verify-ca`` checks that the server's certificate is signed by the CA in
``sslrootcert`` (default ``~/.postgresql/root.crt``, or ``PGSSLROOTCERT``;
``sslrootcert=system`` means the system's CAs), ``verify-full`` also that it
is issued for the host in the URL. ``sslcert``/``sslkey`` (default
``~/.postgresql/postgresql.crt``/``.key`` when both exist, or ``PGSSLCERT``/
``PGSSLKEY``) present a client certificate; ``sslpassword`` unlocks an
encrypted key. A file that is missing or unusable is a ``ConfigError`` that
names the option and the path it looked at, raised when the URL is parsed.

Passwords outside the URL are asyncpg's (libpq's) own: ``PGPASSWORD``, then
the password file (``?passfile=``, else ``PGPASSFILE``, else ``~/.pgpass``).
Whatever password this process can learn from them is registered with
``workhive.redaction`` so that no text workhive emits carries it.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from pathlib import Path

from workhive.errors import ConfigError
from workhive.redaction import register_secret

__all__ = ["VERIFYING_MODES", "register_env_passwords", "ssl_context"]

VERIFYING_MODES = ("verify-ca", "verify-full")


def _home_file(name: str) -> Path:
    return Path.home() / ".postgresql" / name


def _existing(option: str, path: str, why: str) -> str:
    """``path`` (absolute) if it is a readable file, else a ``ConfigError`` naming ``option`` and the path."""
    expanded = Path(path).expanduser().absolute()
    if not expanded.is_file():
        what = "is a directory" if expanded.is_dir() else "does not exist"
        raise ConfigError(f"{option}: {expanded} {what}{why}")
    if not os.access(expanded, os.R_OK):
        raise ConfigError(f"{option}: {expanded} is not readable by this process (check its owner and mode)")
    return str(expanded)


def ssl_context(
    sslmode: str | None, options: Mapping[str, str], environ: Mapping[str, str] | None = None
) -> tuple[ssl.SSLContext | None, str | None]:
    """The ``ssl`` argument for asyncpg when the URL asks for TLS with files, else None (asyncpg's own handling),
    and the CA file the server's certificate is checked against (``system``; None when not checked).

    ``options`` holds the URL's ``sslrootcert``/``sslcert``/``sslkey``/``sslpassword``. None is
    returned for ``disable``/``allow``/``prefer`` and for a URL without TLS options or a
    verifying mode: there the mode string is what asyncpg is given.
    """
    env = os.environ if environ is None else environ
    mode = sslmode
    given_root = options.get("sslrootcert") or env.get("PGSSLROOTCERT")
    has_client = any(options.get(k) for k in ("sslcert", "sslkey"))
    if mode in (None, "disable", "allow", "prefer"):
        if has_client or options.get("sslrootcert"):
            raise ConfigError(
                "sslrootcert/sslcert/sslkey need sslmode=require, verify-ca or verify-full "
                f"(sslmode is {mode or 'unset'})"
            )
        return None, None
    if mode == "require" and given_root:
        mode = "verify-ca"  # libpq: a root certificate given with require is checked
    if mode == "require" and not has_client:
        return None, None
    root: str | None = None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    if mode in VERIFYING_MODES:
        context.check_hostname = mode == "verify-full"
        context.verify_mode = ssl.CERT_REQUIRED
        if given_root == "system":
            root = "system"
            context.load_default_certs()
        else:
            where = "sslrootcert" if options.get("sslrootcert") else (
                "PGSSLROOTCERT" if env.get("PGSSLROOTCERT") else "sslrootcert (default)"
            )  # fmt: skip
            root = _existing(
                f"sslmode={sslmode} checks the server's certificate against {where}",
                given_root or str(_home_file("root.crt")),
                "; give the CA file with ?sslrootcert=PATH (or sslrootcert=system), or use sslmode=require",
            )
            try:
                context.load_verify_locations(cafile=root)
            except ssl.SSLError as exc:
                raise ConfigError(f"sslrootcert: {root} is not a PEM CA certificate ({exc.reason or exc})") from None
    else:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    _load_client(context, options, env)
    return context, root


def _load_client(context: ssl.SSLContext, options: Mapping[str, str], env: Mapping[str, str]) -> None:
    cert = options.get("sslcert") or env.get("PGSSLCERT")
    key = options.get("sslkey") or env.get("PGSSLKEY")
    if not cert and not key:
        default_cert, default_key = _home_file("postgresql.crt"), _home_file("postgresql.key")
        if not (default_cert.is_file() and default_key.is_file()):
            return  # libpq presents the default client certificate only when it is there
        cert, key = str(default_cert), str(default_key)
    if not cert or not key:
        raise ConfigError("sslcert and sslkey go together: give both the client certificate and its key")
    cert = _existing("sslcert", cert, "; give the client certificate (PEM) with ?sslcert=PATH")
    key = _existing("sslkey", key, "; give the client certificate's key (PEM) with ?sslkey=PATH")
    password = options.get("sslpassword")
    if password:
        register_secret(password)
    try:
        # An empty password for a key that needs one fails here rather than prompting on the terminal.
        context.load_cert_chain(cert, key, password=password or "")
    except ssl.SSLError as exc:
        raise ConfigError(
            f"sslcert/sslkey: {cert} and {key} could not be loaded ({exc.reason or exc}): check that they are PEM "
            "files that belong together and, for an encrypted key, the sslpassword"
        ) from None


def register_env_passwords(passfile: str | None, environ: Mapping[str, str] | None = None) -> None:
    """Register ``PGPASSWORD`` and every password in the password file asyncpg would read, for scrubbing."""
    env = os.environ if environ is None else environ
    if env.get("PGPASSWORD"):
        register_secret(env["PGPASSWORD"])
    path = Path(passfile or env.get("PGPASSFILE") or Path.home() / ".pgpass").expanduser()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return  # asyncpg skips an unreadable default file too; an explicit ?passfile= was checked already
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            password = _pgpass_password(line)
            if password:
                register_secret(password)


def _pgpass_password(line: str) -> str | None:
    """The fifth field of a ``.pgpass`` line (``host:port:db:user:password``, ``\\:`` and ``\\\\`` escaped)."""
    fields: list[str] = []
    current: list[str] = []
    escaped = False
    for char in line:
        if escaped:
            current.append(char)
            escaped = False
        elif char == "\\":
            escaped = True
        elif char == ":" and len(fields) < 4:
            fields.append("".join(current))
            current = []
        else:
            current.append(char)
    return "".join(current) if len(fields) == 4 else None
