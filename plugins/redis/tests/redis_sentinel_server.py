"""A private Sentinel set-up on free ports: a master, one replica and three sentinels, for the Sentinel tests.

The master and the replica are ``PrivateRedis`` servers (``redis_server``);
the sentinels are ``redis-server SENTINEL.CONF --sentinel`` with a generated
configuration (``down-after-milliseconds`` 1000, a small ``failover-timeout``).
Nothing here touches the shared server. Every wait is for a condition the
servers report, with a generous deadline; none is a measured time.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from redis_server import PrivateRedis

from workhive.testing.processes import free_port

SERVICE = "wh-master"
#: generous: the machine is shared and slow; nothing measures these
DEADLINE = 90.0


def _skip_or_fail(reason: str) -> None:
    if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
        pytest.fail(f"WORKHIVE_REQUIRE_SERVICES=1 but {reason}")
    pytest.skip(reason)


def _client(port: int) -> Any:
    import redis

    return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=10)


class PrivateSentinel:
    """One ``redis-server --sentinel`` watching ``SERVICE`` on ``master_port``."""

    def __init__(self, binary: str, directory: Path, master_port: int) -> None:
        directory.mkdir(parents=True, exist_ok=True)
        self.binary = binary
        self.directory = directory
        self.port = free_port()
        self.conf = directory / "sentinel.conf"
        # Sentinel rewrites this file as it learns the set-up, so it lives in the test's directory.
        self.conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndaemonize no\ndir {directory}\n"
            f"logfile {directory / 'sentinel.log'}\n"
            f"sentinel monitor {SERVICE} 127.0.0.1 {master_port} 2\n"
            f"sentinel down-after-milliseconds {SERVICE} 1000\n"
            f"sentinel failover-timeout {SERVICE} 3000\n"
            f"sentinel parallel-syncs {SERVICE} 1\n"
        )
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [self.binary, str(self.conf), "--sentinel"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + DEADLINE
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=1) as sock:
                    sock.sendall(b"PING\r\n")
                    if sock.recv(64).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            if self.process.poll() is not None:
                log = self.directory / "sentinel.log"
                tail = log.read_text()[-2000:] if log.exists() else "(no log)"
                _skip_or_fail(f"redis-server does not run in sentinel mode here: {tail}")
            time.sleep(0.05)
        raise RuntimeError(f"the sentinel on port {self.port} did not answer PING within {DEADLINE:g} s")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)
        self.process = None


class SentinelSetup:
    """A master, one replica and three sentinels; ``url(prefix)`` is the hive's ``redis+sentinel://`` URL."""

    def __init__(self, directory: Path) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            _skip_or_fail("redis-server is not installed (the Sentinel tests start private servers)")
        assert binary is not None
        # everysec, not always: the failover test is about replication, and fsync per write only slows it.
        self.master = PrivateRedis(directory / "master", "--appendfsync", "everysec")
        self.replica = PrivateRedis(
            directory / "replica", "--appendfsync", "everysec", "--replicaof", "127.0.0.1", str(self.master.port)
        )
        self.sentinels = [PrivateSentinel(binary, directory / f"sentinel{i}", self.master.port) for i in range(3)]

    def url(self, prefix: str, **options: object) -> str:
        hosts = ",".join(f"127.0.0.1:{s.port}" for s in self.sentinels)
        query = "&".join([f"prefix={prefix}", *(f"{k}={v}" for k, v in options.items())])
        return f"redis+sentinel://{hosts}/{SERVICE}?{query}"

    def start(self) -> None:
        for server in (self.master, self.replica):
            server.directory.mkdir(parents=True, exist_ok=True)
            server.start()
        for sentinel in self.sentinels:
            sentinel.start()
        self.wait_until_watched()

    def wait_until_watched(self) -> None:
        """Until the replica is in sync and every sentinel sees the master, the replica and the other two."""
        deadline = time.monotonic() + DEADLINE
        while True:
            states = [self.sentinel_view(s.port) for s in self.sentinels]
            synced = self.replica_in_sync()
            ready = all(
                st is not None
                and st.get("is_master")
                and int(st.get("num-slaves", 0)) >= 1
                and int(st.get("num-other-sentinels", 0)) >= 2
                for st in states
            )
            if ready and synced:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sentinels never watched the whole set-up: {states}, replica synced: {synced}")
            time.sleep(0.1)

    def sentinel_view(self, port: int) -> dict[str, Any] | None:
        client = _client(port)
        try:
            return dict(client.sentinel_master(SERVICE))
        except Exception:  # not up yet, or does not know the service yet: the caller looks again
            return None
        finally:
            client.close()

    def replica_in_sync(self) -> bool:
        client = _client(self.replica.port)
        try:
            info = client.info("replication")
        except Exception:  # restarting, or gone: not in sync
            return False
        finally:
            client.close()
        return info.get("master_link_status") == "up"

    def named_master(self) -> tuple[str, int] | None:
        """What the sentinels name master now, if all that answer agree."""
        names = set()
        for sentinel in self.sentinels:
            client = _client(sentinel.port)
            try:
                found = client.sentinel_get_master_addr_by_name(SERVICE)
            except Exception:  # a sentinel down: the others still answer
                continue
            finally:
                client.close()
            if found:
                names.add((str(found[0]), int(found[1])))
        return names.pop() if len(names) == 1 else None

    def replicate_everything(self) -> None:
        """Block until the replica acknowledged every write the master took so far (``WAIT 1``)."""
        client = _client(self.master.port)
        try:
            while client.wait(1, 1000) < 1:
                pass
        finally:
            client.close()

    def cut_replica_link(self) -> None:
        """The master closes its replicas' connections (``CLIENT KILL TYPE slave``, the older name of replica)."""
        client = _client(self.master.port)
        try:
            client.client_kill_filter(_type="slave")  # "replica" is refused by redis-py 7.x; both name the same clients
        finally:
            client.close()

    def kill_master(self) -> None:
        """SIGKILL the master: no shutdown, what the replica did not receive is gone."""
        self.master.kill()

    def wait_for_promotion(self) -> tuple[str, int]:
        """Until every sentinel names the replica master (the failover finished), and the replica says so."""
        deadline = time.monotonic() + DEADLINE
        while True:
            if self.named_master() == ("127.0.0.1", self.replica.port):
                client = _client(self.replica.port)
                try:
                    if client.execute_command("ROLE")[0] == "master":
                        return "127.0.0.1", self.replica.port
                except Exception:  # busy being promoted: look again
                    pass
                finally:
                    client.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the sentinels never promoted the replica: they name {self.named_master()}")
            time.sleep(0.1)

    def wait_until_demoted(self, port: int) -> None:
        """Until the server on ``port`` runs as a replica (the sentinels reconfigured an old master)."""
        deadline = time.monotonic() + DEADLINE
        while True:
            client = _client(port)
            try:
                if client.execute_command("ROLE")[0] in ("slave", "replica"):
                    return
            except Exception:  # restarting its replication: look again
                pass
            finally:
                client.close()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the server on port {port} was never turned into a replica")
            time.sleep(0.1)

    def readonly_errors(self, port: int) -> int:
        """How many READONLY replies the server on ``port`` sent (INFO errorstats)."""
        client = _client(port)
        try:
            stats = client.info("errorstats")
        finally:
            client.close()
        found = stats.get("errorstat_READONLY", {})
        return int(found.get("count", 0)) if isinstance(found, dict) else 0

    def stop(self) -> None:
        for sentinel in self.sentinels:
            sentinel.stop()
        for server in (self.replica, self.master):
            server.stop()
