"""A private PgBouncer on a free port in front of the tests' PostgreSQL (helpers).

Debian's ``pgbouncer`` package (1.18 on bookworm) provides the binary; ``.ci/run``
installs it. Without it the PgBouncer tests skip with the reason, except under
``WORKHIVE_REQUIRE_SERVICES=1``, where they fail. Each bouncer runs in a temporary
directory of its own with its own config (``auth_type = trust`` and a generated
userlist), leads its own session, and is killed when its tests end; the shared
server behind it is only connected to, never reconfigured.

>>> bouncer = PrivatePgbouncer("transaction")  # doctest: +SKIP
>>> bouncer.start(); bouncer.url("wh_test_1"); bouncer.stop()
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
from urllib.parse import urlsplit

import pytest
from postgres_server import SERVER

from workhive.testing.processes import free_port

__all__ = ["PrivatePgbouncer", "bouncer", "stop_all"]

BINARY = os.environ.get("WORKHIVE_PGBOUNCER", shutil.which("pgbouncer") or "/usr/sbin/pgbouncer")
START_TIMEOUT = 120.0  # the machine is shared: a slow start is not a failure
_UPSTREAM = urlsplit(SERVER)
#: server connections per database/user pair. In transaction mode a few, so that the clients of
#: a test (pools of 10, several processes) share them and every statement may land on another;
#: in session mode each client session holds one, so enough for a test's clients at once.
POOL_SIZES = {"transaction": 4, "session": 30}


def missing(reason: str) -> None:
    """Skip with ``reason``, or fail under ``WORKHIVE_REQUIRE_SERVICES=1`` (CI installs pgbouncer)."""
    if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"{reason}; WORKHIVE_REQUIRE_SERVICES=1 requires it", pytrace=False)
    pytest.skip(reason)


class PrivatePgbouncer:
    """PgBouncer in ``mode`` (``transaction`` or ``session``) in front of the tests' PostgreSQL.

    PgBouncer refuses to run as root: as root (CI, the dev machines) it runs as the
    ``postgres`` user, in a directory made with ``mkdtemp`` and handed to that user.
    """

    def __init__(self, mode: str) -> None:
        if not os.path.exists(BINARY):
            missing(f"pgbouncer is not installed ({BINARY}; apt-get install -y pgbouncer)")
        self.mode = mode
        self.user: str | None = None
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                missing("running as root and there is no 'postgres' user to run PgBouncer as")
            self.user = "postgres"
        self.directory = Path(tempfile.mkdtemp(prefix=f"workhive-pgbouncer-{mode}-"))
        self.port = free_port()
        self.process: subprocess.Popen[bytes] | None = None
        user = _UPSTREAM.username or "postgres"
        (self.directory / "userlist.txt").write_text(f'"{user}" ""\n', encoding="utf-8")
        # The defaults a production PgBouncer has: no ignore_startup_parameters, no
        # max_prepared_statements (1.21+ only), server_reset_query DISCARD ALL in session mode.
        (self.directory / "pgbouncer.ini").write_text(
            "[databases]\n"
            f"* = host={_UPSTREAM.hostname} port={_UPSTREAM.port or 5432}\n"
            "[pgbouncer]\n"
            "listen_addr = 127.0.0.1\n"
            f"listen_port = {self.port}\n"
            "unix_socket_dir =\n"
            "auth_type = trust\n"
            f"auth_file = {self.directory / 'userlist.txt'}\n"
            f"pool_mode = {mode}\n"
            f"default_pool_size = {POOL_SIZES[mode]}\n"
            "max_client_conn = 1000\n"
            # Idle server connections are slots of the shared server: given back after a few seconds.
            "server_idle_timeout = 5\n"
            f"logfile = {self.directory / 'pgbouncer.log'}\n"
            f"pidfile = {self.directory / 'pgbouncer.pid'}\n",
            encoding="utf-8",
        )
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            for path in (self.directory, *self.directory.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)

    def start(self) -> None:
        self.process = subprocess.Popen(
            [BINARY, str(self.directory / "pgbouncer.ini")],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, user=self.user, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the private PgBouncer exited at start: {self.log()[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                    return
            except OSError:
                time.sleep(0.1)
        raise RuntimeError(f"the private PgBouncer on port {self.port} was not listening within {START_TIMEOUT:.0f} s")

    def log(self) -> str:
        try:
            return (self.directory / "pgbouncer.log").read_text(errors="replace")
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(timeout=60)
        self.process = None
        shutil.rmtree(self.directory, ignore_errors=True)

    def base(self) -> str:
        """The tests' server URL with this bouncer's port in place of the server's."""
        user = _UPSTREAM.username or "postgres"
        return f"postgresql://{user}@127.0.0.1:{self.port}{_UPSTREAM.path}"

    def url(self, schema: str, direct: bool = False) -> str:
        """The storage URL of ``schema`` through this bouncer (``direct``: with direct_host/direct_port)."""
        url = f"{self.base()}?schema={schema}&pgbouncer={self.mode}"
        if direct:
            url += f"&direct_host={_UPSTREAM.hostname}&direct_port={_UPSTREAM.port or 5432}"
        return url


_running: dict[str, PrivatePgbouncer] = {}


def bouncer(mode: str) -> PrivatePgbouncer:
    """The bouncer of ``mode`` for this process, started on first use (``stop_all`` ends them)."""
    if mode not in _running:
        started = PrivatePgbouncer(mode)
        try:
            started.start()
        except BaseException:
            started.stop()
            raise
        _running[mode] = started
    return _running[mode]


def stop_all() -> None:
    for mode in list(_running):
        _running.pop(mode).stop()
