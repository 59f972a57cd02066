"""TLS (``rediss://``) against a private server with throwaway certificates, and passwords kept out of the URL.

The certificates are made at test time in the tmp dir (``workhive.testing.certificates``).
A wrong CA must be an immediate certificate error, not "cannot reach Redis" after
``retry_for`` of retries; a missing file a ``ConfigError`` naming it before any connection.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest
import redis as redis_py
from redis_server import SECRET, PrivateRedis, keys_of, new_prefix, url_for
from workhive_redis import RedisStorage, parse_url

import workhive
from workhive.errors import ConfigError, StorageUnavailable
from workhive.redaction import forget_secrets
from workhive.testing.certificates import CertPair, make_ca, make_certificate, openssl_missing
from workhive.testing.environment import workhive_free_env
from workhive.testing.processes import free_port

# Long enough that a retried failure could not finish inside the test's bound on a loaded machine.
_LONG_RETRY = 600


@pytest.fixture
def tls_server(tmp_path: Path) -> tuple[PrivateRedis, int, CertPair, CertPair]:
    """A private redis-server with a TLS port whose certificate the "trusted" CA signed; also an unrelated CA."""
    why = openssl_missing()
    if why:
        pytest.skip(why)
    certs = tmp_path / "certs"
    certs.mkdir()
    trusted = make_ca(certs, "trusted")
    other = make_ca(certs, "other")
    server_cert = make_certificate(certs, trusted, "server")
    tls_port = free_port()
    data = tmp_path / "data"
    data.mkdir()
    server = PrivateRedis(
        data, "--tls-port", str(tls_port), "--tls-cert-file", str(server_cert.cert),
        "--tls-key-file", str(server_cert.key), "--tls-ca-cert-file", str(trusted.cert), "--tls-auth-clients", "no",
    )  # fmt: skip
    server.start()
    yield server, tls_port, trusted, other
    server.stop()


async def _bounded(coro: object) -> object:
    # Generous: only a retry loop (retry_for=600) could take this long; the immediate error takes a round trip.
    return await asyncio.wait_for(coro, timeout=120)  # type: ignore[arg-type]


def test_the_right_ca_connects_and_stores(tls_server: tuple[PrivateRedis, int, CertPair, CertPair]) -> None:
    server, tls_port, trusted, _ = tls_server
    url = f"rediss://127.0.0.1:{tls_port}/0?prefix=tls&ssl_ca_certs={trusted.cert}"

    async def main() -> None:
        async with workhive.open(url) as hive:
            pool = hive.pool("p")
            await pool.push({"n": 1})
            assert await pool.size() == 1

    asyncio.run(main())
    plain = redis_py.Redis(port=server.port)
    assert plain.exists("{tls}:pools") or plain.keys("{tls}*")
    plain.close()


def test_a_certificate_from_another_ca_is_an_immediate_certificate_error(
    tls_server: tuple[PrivateRedis, int, CertPair, CertPair],
) -> None:
    _, tls_port, _, other = tls_server
    url = f"rediss://127.0.0.1:{tls_port}/0?prefix=tls&retry_for={_LONG_RETRY}&ssl_ca_certs={other.cert}"

    async def main() -> None:
        with pytest.raises(StorageUnavailable) as info:
            await _bounded(RedisStorage(url).open())
        text = str(info.value)
        assert "certificate" in text and "Not retried" in text, text
        assert str(other.cert) in text  # which CA file it checked against
        assert "check that the server runs" not in text and "retried for" not in text

    asyncio.run(main())


@pytest.mark.parametrize("option", ["ssl_ca_certs", "ssl_certfile"])
def test_a_missing_tls_file_is_a_config_error_naming_option_and_file(tmp_path: Path, option: str) -> None:
    missing = tmp_path / "nowhere" / "ca.pem"
    # Port 1: nothing listens there, so a connection attempt would fail differently (StorageUnavailable).
    with pytest.raises(ConfigError) as info:
        RedisStorage(f"rediss://:{SECRET}@127.0.0.1:1/0?{option}={missing}")
    text = str(info.value)
    assert option in text and str(missing) in text and "does not exist" in text
    assert SECRET not in text


def test_password_file_and_environment_keep_the_password_out_of_the_url(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    server = PrivateRedis(tmp_path, "--requirepass", SECRET)
    server.start()
    try:
        secret_file = tmp_path / "redis.pw"
        secret_file.write_text(SECRET + "\n")
        secret_file.chmod(0o600)
        prefix = new_prefix()
        base = f"redis://127.0.0.1:{server.port}/0"
        monkeypatch.delenv("WORKHIVE_REDIS_PASSWORD", raising=False)
        monkeypatch.delenv("REDISCLI_AUTH", raising=False)

        async def push(url: str) -> None:
            async with workhive.open(url) as hive:
                await hive.pool("p").push({"n": 1})

        from_file = url_for(prefix, base, password_file=secret_file)
        asyncio.run(push(from_file))
        cfg = parse_url(from_file)
        assert cfg.password == SECRET
        for text in (repr(cfg), cfg.display, repr(RedisStorage(from_file))):
            assert SECRET not in text

        for variable in ("WORKHIVE_REDIS_PASSWORD", "REDISCLI_AUTH"):
            monkeypatch.setenv(variable, SECRET)
            asyncio.run(push(url_for(prefix, base)))
            monkeypatch.delenv(variable)

        # `workhive config`, `push` and `status` (another process) find it in the environment and never show it.
        env = workhive_free_env()
        env["REDISCLI_AUTH"] = SECRET
        (tmp_path / "items.jsonl").write_text('{"n": 2}\n')
        for args in (["config"], ["config", "--json"], ["push", "p", "items.jsonl"], ["status"], ["status", "--json"]):
            run = subprocess.run([sys.executable, "-m", "workhive", "--storage", url_for(prefix, base), *args],
                                 capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)  # fmt: skip
            assert run.returncode == 0, run.stderr
            assert SECRET not in run.stdout + run.stderr

        async def pending() -> int:
            async with workhive.open(url_for(prefix, base, password_file=secret_file)) as hive:
                return await hive.pool("p").size()

        assert asyncio.run(pending()) == 4  # file, two variables, the CLI's push

        # A wrong password from the environment: the login error names where to look, never the password.
        monkeypatch.setenv("REDISCLI_AUTH", "wrong-" + SECRET)
        with pytest.raises(StorageUnavailable, match="REDISCLI_AUTH") as info:
            asyncio.run(push(url_for(prefix, base, retry_for=0.3)))
        assert SECRET not in str(info.value)
        keys = keys_of(prefix, f"redis://:{SECRET}@127.0.0.1:{server.port}/0")
        assert keys and not any(SECRET in k for k in keys)
    finally:
        forget_secrets()
        server.stop()


@pytest.mark.parametrize(("content", "match"), [(None, "no such file"), ("", "empty"), ("\n", "empty")])
def test_a_bad_password_file_is_a_config_error_naming_it(tmp_path: Path, content: str | None, match: str) -> None:
    path = tmp_path / "pw"
    if content is not None:
        path.write_text(content)
    with pytest.raises(ConfigError, match=match) as info:
        RedisStorage(f"redis://127.0.0.1:1/0?password_file={path}")
    assert "password_file" in str(info.value) and str(path) in str(info.value)


def test_a_password_in_the_url_and_a_password_file_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "pw"
    path.write_text("other-password\n")
    with pytest.raises(ConfigError, match="only one") as info:
        parse_url(f"redis://:{SECRET}@127.0.0.1:1/0?password_file={path}")
    assert SECRET not in str(info.value) and "other-password" not in str(info.value)
