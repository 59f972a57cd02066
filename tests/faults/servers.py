"""Private PostgreSQL and Redis servers on free ports, which the fault suite may kill and restart.

The shared servers (5432, 6379) are never touched here: every fault scenario runs
against a server this module started in a temporary directory, on a port of its
own, and killed when the session ends. Missing binaries skip the scenario with
the reason, except under ``WORKHIVE_REQUIRE_SERVICES=1`` (CI), where they fail.

>>> server = PrivateRedis(Path(tempfile.mkdtemp()))  # doctest: +SKIP
>>> server.start(); server.kill(); server.start()    # SIGKILL: what the AOF holds survives
"""

from __future__ import annotations

import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

__all__ = ["PG_BIN", "PrivatePostgres", "PrivateRedis", "free_port", "missing"]

PG_BIN = Path(os.environ.get("WORKHIVE_FAULTS_PG_BIN", "/usr/lib/postgresql/15/bin"))
START_TIMEOUT = 120.0  # generous: the machine is shared; a server that is slow to start is not a failure


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def missing(reason: str) -> None:
    """Skip with ``reason``, or fail under ``WORKHIVE_REQUIRE_SERVICES=1`` (CI requires every engine)."""
    if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason}; WORKHIVE_REQUIRE_SERVICES=1 requires it", pytrace=False)
    pytest.skip(reason)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGKILL the server and every process it started (it leads its own session)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait(timeout=60)
    else:
        try:  # the leader is gone; backends it left must not outlive it
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class PrivateRedis:
    """``redis-server`` with an append-only file fsynced on every write (``--appendfsync always``)."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            missing("redis-server is not installed (the fault suite starts a private one)")
        self.binary = str(binary)
        self.directory = directory
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.kills = 0

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def start(self) -> None:
        args = [
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
            "--appendonly", "yes", "--appendfsync", "always", "--save", "", "--daemonize", "no",
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(self.address, timeout=2) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.process.poll() is not None:
                log = self.directory / "redis.log"
                raise RuntimeError(f"redis-server exited: {log.read_text()[-2000:] if log.exists() else ''}")
            time.sleep(0.05)
        raise RuntimeError(f"redis-server on port {self.port} did not answer PING within {START_TIMEOUT:.0f} s")

    def kill(self) -> None:
        """SIGKILL: no shutdown, no final save; what the append-only file holds is what survives."""
        if self.process is not None:
            _kill_group(self.process)
            self.kills += 1
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            _kill_group(self.process)
        self.process = None

    def stored_files(self) -> list[Path]:
        """Every file the server persisted (the AOF and its manifest), for the canary grep."""
        return [p for p in self.directory.rglob("*") if p.is_file() and p.name != "redis.log"]


class PrivatePostgres:
    """A PostgreSQL 15 cluster made with ``initdb`` in a temporary directory, run as ``postgres``.

    As root (CI, the dev machines) the cluster belongs to the ``postgres`` user, since
    the server refuses to run as root; its directory is then made with ``mkdtemp`` under
    the system temporary directory (pytest's are private to root) and removed by ``stop``.
    The postmaster leads its own session, so ``kill`` takes its backends down with it,
    the way a crashed host would, and ``start`` runs crash recovery.
    """

    def __init__(self) -> None:
        for tool in ("initdb", "postgres"):
            if not (PG_BIN / tool).exists():
                missing(f"{PG_BIN / tool} is not installed (the fault suite starts a private PostgreSQL)")
        self.user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                missing("running as root and there is no 'postgres' user to run a private PostgreSQL as")
            self.user = "postgres"
        self.directory = Path(tempfile.mkdtemp(prefix="workhive-faults-pg-"))
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            os.chown(self.directory, entry.pw_uid, entry.pw_gid)
        self.data = self.directory / "data"
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        self.kills = 0
        self._initdb()

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def dsn(self, port: int | None = None) -> str:
        """The server's URL (``port``: a proxy in front of it), database ``postgres``, trusted."""
        return f"postgresql://postgres@127.0.0.1:{port or self.port}/postgres"

    def _run(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(list(args), capture_output=True, timeout=300, user=self.user, check=False)

    def _initdb(self) -> None:
        done = self._run(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync",
            "-E", "UTF8", "--locale", "C",
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"initdb failed: {done.stderr.decode(errors='replace')[-2000:]}")

    def start(self) -> None:
        log = open(self.directory / "postgres.log", "ab")  # the server writes its log there
        try:
            # fsync stays off: the faults here kill processes, not the machine, so the page
            # cache survives every kill and the files are as durable as the test needs.
            self.process = subprocess.Popen(
                [
                    str(PG_BIN / "postgres"), "-D", str(self.data), "-p", str(self.port),
                    "-c", "listen_addresses=127.0.0.1", "-c", f"unix_socket_directories={self.directory}",
                    "-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_connections=200",
                    "-c", "shared_buffers=32MB",
                ],
                stdout=log, stderr=log, user=self.user, start_new_session=True,
            )  # fmt: skip
        finally:
            log.close()
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            ready = self._run(str(PG_BIN / "pg_isready"), "-h", "127.0.0.1", "-p", str(self.port), "-t", "2")
            if ready.returncode == 0:
                return
            if self.process.poll() is not None:
                tail = (self.directory / "postgres.log").read_text(errors="replace")[-2000:]
                raise RuntimeError(f"the private PostgreSQL exited at start: {tail}")
            time.sleep(0.1)
        raise RuntimeError(f"the private PostgreSQL on port {self.port} was not ready within {START_TIMEOUT:.0f} s")

    def kill(self) -> None:
        """SIGKILL the postmaster and its backends at once; the next ``start`` recovers from the WAL."""
        if self.process is not None:
            _kill_group(self.process)
            self.kills += 1
        self.process = None

    def stop(self) -> None:
        if self.process is not None:
            _kill_group(self.process)
        self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)
