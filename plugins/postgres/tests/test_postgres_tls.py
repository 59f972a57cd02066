"""TLS files (sslrootcert, sslcert, sslkey, sslpassword) and passwords outside the URL (passfile, PGPASSWORD).

Bad files are ``ConfigError``s naming the option and the path, before any
connection. Against a private PostgreSQL with ``ssl=on`` (initdb in a temporary
directory, certificates made at test time): the right CA connects under
verify-full, a certificate from another CA or for another host name is an
immediate error naming the CA file, and a password kept in a passfile logs in.
"""

from __future__ import annotations

import asyncio
import importlib.util
import os
import pwd
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from postgres_server import SECRET

import workhive
from workhive.errors import ConfigError, StorageUnavailable
from workhive.redaction import forget_secrets, scrub
from workhive.testing.certificates import CertPair, make_ca, make_certificate, openssl_missing
from workhive.urls import redact_url
from workhive_postgres import PostgresStorage, parse_url

_SERVERS = Path(__file__).resolve().parents[3] / "tests" / "faults" / "servers.py"


def _private_postgres_class() -> Any:
    """The fault suite's ``PrivatePostgres`` (initdb in a temporary directory, run as ``postgres`` under root)."""
    spec = importlib.util.spec_from_file_location("workhive_fault_servers", _SERVERS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("workhive_fault_servers", module)
    spec.loader.exec_module(module)
    return module.PrivatePostgres


# -- checked when the URL is parsed: no server needed -----------------------------------------
@pytest.mark.parametrize("option", ["sslrootcert", "sslcert", "sslkey"])
def test_a_missing_tls_file_is_a_config_error_naming_option_and_path(tmp_path: Path, option: str) -> None:
    why = openssl_missing()
    if why:
        pytest.skip(why)
    ca = make_ca(tmp_path, "ca")
    client = make_certificate(tmp_path, ca, "client")
    files = {"sslrootcert": str(ca.cert), "sslcert": str(client.cert), "sslkey": str(client.key)}
    missing = tmp_path / "absent" / f"{option}.pem"
    files[option] = str(missing)
    query = "&".join(f"{k}={v}" for k, v in files.items())
    # Port 1: nothing listens; parsing must fail before any connection is tried.
    with pytest.raises(ConfigError) as info:
        PostgresStorage(f"postgresql://app:{SECRET}@127.0.0.1:1/db?sslmode=verify-full&{query}")
    text = str(info.value)
    assert option in text and str(missing) in text and "does not exist" in text
    assert SECRET not in text


def test_verify_full_without_sslrootcert_names_the_default_file_it_looked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("PGSSLROOTCERT", raising=False)
    with pytest.raises(ConfigError) as info:
        parse_url("postgresql://app@127.0.0.1:1/db?sslmode=verify-full")
    assert str(tmp_path / ".postgresql" / "root.crt") in str(info.value)
    assert "sslrootcert" in str(info.value)


def test_client_files_without_a_tls_mode_and_a_missing_passfile_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="sslmode=require, verify-ca or verify-full"):
        parse_url(f"postgresql://app@127.0.0.1:1/db?sslmode=prefer&sslcert={tmp_path}/c.crt&sslkey={tmp_path}/c.key")
    with pytest.raises(ConfigError, match="passfile") as info:
        parse_url(f"postgresql://app@127.0.0.1:1/db?passfile={tmp_path}/pgpass")
    assert str(tmp_path / "pgpass") in str(info.value)


def test_an_encrypted_key_with_the_wrong_sslpassword_is_a_config_error_and_no_text_shows_it(tmp_path: Path) -> None:
    why = openssl_missing()
    if why:
        pytest.skip(why)
    ca = make_ca(tmp_path, "ca")
    client = make_certificate(tmp_path, ca, "client")
    locked = tmp_path / "client-locked.key"
    subprocess.run(
        ["openssl", "pkey", "-in", str(client.key), "-aes256", "-passout", f"pass:{SECRET}", "-out", str(locked)],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    base = f"postgresql://app@127.0.0.1:1/db?sslmode=verify-ca&sslrootcert={ca.cert}&sslcert={client.cert}"
    try:
        with pytest.raises(ConfigError, match="sslpassword") as info:
            parse_url(f"{base}&sslkey={locked}&sslpassword=wrong-{SECRET}")
        assert SECRET not in str(info.value)
        url = f"{base}&sslkey={locked}&sslpassword={SECRET}"
        cfg = parse_url(url)
        assert cfg.ssl_context is not None
        for text in (repr(cfg), cfg.redacted, redact_url(url), repr(PostgresStorage(url))):
            assert SECRET not in text
        assert SECRET not in scrub(f"a message quoting {SECRET}")
    finally:
        forget_secrets()


# -- against a private server with ssl=on -----------------------------------------------------
@pytest.fixture(scope="module")
def tls_postgres(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Any, CertPair, CertPair]]:
    why = openssl_missing()
    if why:
        pytest.skip(why)
    certs = tmp_path_factory.mktemp("pg-certs")
    trusted, other = make_ca(certs, "trusted"), make_ca(certs, "other")
    # Issued for 127.0.0.1 and db.invalid only, so "localhost" is a host name the certificate does not list.
    server_cert = make_certificate(certs, trusted, "server", ip="127.0.0.1", dns="db.invalid")
    server = _private_postgres_class()()
    try:
        data = Path(server.data)
        shutil.copy(server_cert.cert, data / "server.crt")
        shutil.copy(server_cert.key, data / "server.key")
        if server.user is not None:
            entry = pwd.getpwnam(server.user)
            for name in ("server.crt", "server.key"):
                os.chown(data / name, entry.pw_uid, entry.pw_gid)
        (data / "server.key").chmod(0o600)
        with open(data / "postgresql.conf", "a") as conf:
            conf.write("\nssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n")
        # The postgres superuser is trusted (set-up); "app" must give its password, which passfile holds.
        (data / "pg_hba.conf").write_text(
            "local all all trust\nhostssl all app 127.0.0.1/32 scram-sha-256\nhost all postgres 127.0.0.1/32 trust\n"
        )
        server.start()

        async def make_user() -> None:
            import asyncpg

            conn = await asyncpg.connect(server.dsn(), ssl=False, timeout=60)
            try:
                await conn.execute(f"CREATE ROLE app LOGIN PASSWORD '{SECRET}'")
                await conn.execute("GRANT CREATE ON DATABASE postgres TO app")
            finally:
                await conn.close()

        asyncio.run(make_user())
        yield server, trusted, other
    finally:
        server.stop()


def _passfile(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "pgpass"
    path.write_text(f"127.0.0.1:{port}:*:app:{SECRET}\n")
    path.chmod(0o600)
    return path


def test_verify_full_with_the_right_ca_and_a_passfile_stores(
    tls_postgres: tuple[Any, CertPair, CertPair], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, trusted, _ = tls_postgres
    monkeypatch.delenv("PGPASSWORD", raising=False)
    passfile = _passfile(tmp_path, server.port)
    url = (
        f"postgresql://app@127.0.0.1:{server.port}/postgres?schema=tls_ok&sslmode=verify-full"
        f"&sslrootcert={trusted.cert}&passfile={passfile}"
    )

    async def main() -> int:
        async with workhive.open(url) as hive:
            await hive.pool("p").push({"n": 1})
            return await hive.pool("p").size()

    try:
        assert asyncio.run(main()) == 1
        assert SECRET not in scrub(f"quoting {SECRET}")  # the passfile's password is registered for scrubbing
    finally:
        forget_secrets()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
def test_a_certificate_the_url_cannot_trust_is_an_immediate_error_naming_the_ca_file(
    tls_postgres: tuple[Any, CertPair, CertPair], host: str
) -> None:
    server, trusted, other = tls_postgres
    # Wrong CA at 127.0.0.1; right CA but a host name the certificate does not list at localhost.
    ca = other if host == "127.0.0.1" else trusted
    url = (
        f"postgresql://postgres@{host}:{server.port}/postgres?schema=tls_bad&sslmode=verify-full"
        f"&sslrootcert={ca.cert}&retry_for=600"
    )

    async def main() -> None:
        with pytest.raises(StorageUnavailable) as info:
            # Generous bound: only a retry loop (retry_for=600) could take this long.
            await asyncio.wait_for(PostgresStorage(url).open(), timeout=120)
        text = str(info.value)
        assert "TLS certificate problem" in text, text
        if host == "127.0.0.1":
            assert f"sslrootcert={ca.cert}" in text
        else:
            assert "not issued for localhost" in text and "verify-ca" in text
        assert "check that the server is running" not in text

    asyncio.run(main())


def test_verify_ca_accepts_a_certificate_for_another_host_name(tls_postgres: tuple[Any, CertPair, CertPair]) -> None:
    server, trusted, _ = tls_postgres
    url = f"postgresql://postgres@localhost:{server.port}/postgres?schema=tls_ca&sslmode=verify-ca&sslrootcert={trusted.cert}"

    async def main() -> int:
        async with workhive.open(url) as hive:
            await hive.pool("p").push({"n": 1})
            return await hive.pool("p").size()

    assert asyncio.run(main()) == 1


def test_passwords_from_pgpassword_and_the_passfile_are_scrubbed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    passfile = tmp_path / "pgpass"
    passfile.write_text("# comment\ndb:5432:*:app:file\\:pass-word\n*:*:*:*:other-" + SECRET + "\n")
    monkeypatch.setenv("PGPASSWORD", "env-" + SECRET)
    try:
        cfg = parse_url(f"postgresql://app@127.0.0.1:1/db?passfile={passfile}")
        assert cfg.connect_kwargs()["passfile"] == str(passfile)
        text = scrub(f"env-{SECRET} file:pass-word other-{SECRET}")
        assert SECRET not in text and "file:pass-word" not in text
        # A password in the URL: nothing else is read (or registered).
        forget_secrets()
        parse_url(f"postgresql://app:url-pass@127.0.0.1:1/db?passfile={passfile}")
        assert "file:pass-word" in scrub("file:pass-word")
    finally:
        forget_secrets()
