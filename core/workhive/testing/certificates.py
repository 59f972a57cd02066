"""Throwaway TLS certificates for tests that start a private server with TLS, made with the ``openssl`` CLI.

Nothing is committed: each test makes its own CA and server certificate in
its tmp dir. ``make_ca`` twice gives two unrelated CAs, which is how a test
shows a certificate signed by the wrong CA.

>>> ca = make_ca(tmp_path, "trusted")                      # doctest: +SKIP
>>> server = make_certificate(tmp_path, ca, "server", ip="127.0.0.1")  # doctest: +SKIP
>>> server.cert, server.key                                 # doctest: +SKIP
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import attrs

__all__ = ["CertPair", "make_ca", "make_certificate", "openssl_missing"]


@attrs.frozen
class CertPair:
    """A PEM certificate and its unencrypted key (mode 0600, as servers demand)."""

    cert: Path
    key: Path


def openssl_missing() -> str | None:
    """None when the ``openssl`` CLI is there, else why the TLS tests cannot run."""
    return None if shutil.which("openssl") else "the openssl command is not installed (the TLS tests make certificates)"


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=120)


def make_ca(directory: Path, name: str) -> CertPair:
    """A self-signed CA named ``name`` in ``directory``."""
    pair = CertPair(directory / f"{name}-ca.crt", directory / f"{name}-ca.key")
    _openssl(
        "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", f"/CN=workhive test CA {name}",
        "-keyout", str(pair.key), "-out", str(pair.cert),
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip
    pair.key.chmod(0o600)
    return pair


def make_certificate(
    directory: Path, ca: CertPair, name: str, *, ip: str = "127.0.0.1", dns: str = "localhost"
) -> CertPair:
    """A certificate for ``ip`` and ``dns`` (subjectAltName) signed by ``ca``; also usable as a client's."""
    pair = CertPair(directory / f"{name}.crt", directory / f"{name}.key")
    request = directory / f"{name}.csr"
    extensions = directory / f"{name}.ext"
    extensions.write_text(f"subjectAltName=IP:{ip},DNS:{dns}\nextendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-subj", f"/CN={dns}", "-keyout", str(pair.key),
             "-out", str(request))  # fmt: skip
    _openssl(
        "x509", "-req", "-in", str(request), "-CA", str(ca.cert), "-CAkey", str(ca.key), "-CAcreateserial",
        "-days", "2", "-extfile", str(extensions), "-out", str(pair.cert),
    )  # fmt: skip
    pair.key.chmod(0o600)
    return pair
