"""A private Redis Cluster for the cluster tests: masters with a replica each, on free ports, stopped afterwards.

Each node is a ``PrivateRedis`` (redis_server.py) started with
``--cluster-enabled yes`` in a directory of its own; ``redis-cli --cluster
create`` joins them. The helpers move a slot from one master to another
(``CLUSTER SETSLOT`` + ``MIGRATE``, as ``redis-cli --cluster reshard`` does,
a few keys per ``MIGRATE`` so the migration lasts) and kill a master so its
replica is promoted. Every wait is for a condition, with a generous deadline.
"""

from __future__ import annotations

import os
import random
import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from redis_server import PrivateRedis

#: how long a silent master is given before its replica takes over (ms); small, so a failover is quick
NODE_TIMEOUT_MS = 1500
#: for clusters no test fails over: a loaded machine must not make a master look dead
CALM_NODE_TIMEOUT_MS = 30000


def cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too; Redis needs the port at most 55535."""
    for _ in range(1000):
        port = random.randint(20000, 45000)
        try:
            with socket.socket() as a, socket.socket() as b:
                a.bind(("127.0.0.1", port))
                b.bind(("127.0.0.1", port + 10000))
        except OSError:
            continue
        return port
    raise RuntimeError("no free pair of ports for a cluster node")


def _until(what: str, check: Callable[[], bool], timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the private cluster never reached: {what}")
        time.sleep(0.1)


class PrivateCluster:
    """``masters`` masters, ``replicas`` replicas each, under ``directory``."""

    def __init__(
        self, directory: Path, masters: int = 3, replicas: int = 1, node_timeout_ms: int = NODE_TIMEOUT_MS
    ) -> None:
        if shutil.which("redis-cli") is None or shutil.which("redis-server") is None:
            why = "redis-server and redis-cli are needed (the cluster tests create a private cluster with them)"
            if os.environ.get("WORKHIVE_REQUIRE_SERVICES") == "1":
                pytest.fail(f"WORKHIVE_REQUIRE_SERVICES=1 but {why}")
            pytest.skip(why)
        self.nodes: list[PrivateRedis] = []
        for index in range(masters * (1 + replicas)):
            node_dir = directory / f"node{index}"
            node_dir.mkdir(parents=True, exist_ok=True)
            node = PrivateRedis(
                node_dir,
                "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(node_timeout_ms), "--appendonly", "no",
                # a replica may take over however long its link was down (the test kills masters under load)
                "--cluster-replica-validity-factor", "0",
            )  # fmt: skip
            node.port = cluster_port()
            node.url = f"redis://127.0.0.1:{node.port}/0"
            self.nodes.append(node)
        self.replicas = replicas
        self.dead: set[int] = set()

    @property
    def url(self) -> str:
        """The cluster URL naming every node (the dead ones too: discovery skips them)."""
        return "redis+cluster://" + ",".join(f"127.0.0.1:{n.port}" for n in self.nodes) + "/"

    def client(self, port: int) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=port, decode_responses=True, socket_timeout=30)

    def start(self) -> None:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *addresses, "--cluster-replicas", str(self.replicas),
             "--cluster-yes"],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=120,
        )  # fmt: skip
        _until("every node sees cluster_state:ok", lambda: all(self._state_ok(n.port) for n in self.nodes))
        _until("every replica in sync", self.replicated)

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def _state_ok(self, port: int) -> bool:
        try:
            with self.client(port) as c:
                return "cluster_state:ok" in c.execute_command("CLUSTER", "INFO")
        except Exception:
            return False

    def _live_port(self) -> int:
        return next(n.port for i, n in enumerate(self.nodes) if i not in self.dead)

    def topology(self) -> dict[str, dict[str, Any]]:
        """Node id -> {port, master (bool), master_id, slots: [(start, end)], failed (bool)}, read from a live node."""
        with self.client(self._live_port()) as c:
            text = c.execute_command("CLUSTER", "NODES")
        nodes: dict[str, dict[str, Any]] = {}
        for line in text.splitlines():
            parts = line.split()
            flags = parts[2].split(",")
            slots = []
            for spec in parts[8:]:
                if spec.startswith("["):
                    continue  # a slot in migration
                start, _, end = spec.partition("-")
                slots.append((int(start), int(end or start)))
            nodes[parts[0]] = {
                "port": int(parts[1].split("@")[0].rsplit(":", 1)[1]),
                "master": "master" in flags,
                "master_id": parts[3],
                "slots": slots,
                "failed": "fail" in flags or "fail?" in flags,
            }
        return nodes

    def owner(self, slot: int) -> tuple[str, int]:
        """The id and port of the master serving ``slot``."""
        for node_id, node in self.topology().items():
            if node["master"] and not node["failed"] and any(a <= slot <= b for a, b in node["slots"]):
                return node_id, node["port"]
        raise RuntimeError(f"no live master serves slot {slot}")

    def serves(self, slot: int, port: int) -> bool:
        """True when the master on ``port`` serves ``slot`` (False while no live master does)."""
        try:
            return self.owner(slot)[1] == port
        except RuntimeError:
            return False

    def masters(self) -> list[tuple[str, int]]:
        return sorted(
            (i, n["port"]) for i, n in self.topology().items() if n["master"] and not n["failed"] and n["slots"]
        )

    def replicated(self) -> bool:
        """True when every live master's replicas have acknowledged all it wrote."""
        for _, port in self.masters():
            with self.client(port) as c:
                info = c.info("replication")
            offset = info["master_repl_offset"]
            acked = [v["offset"] for k, v in info.items() if k.startswith("slave") and isinstance(v, dict)]
            if len(acked) < self.replicas or min(acked) < offset:
                return False
        return True

    def migrate_slot(self, slot: int, to_port: int, keys_per_step: int = 10) -> int:
        """Move ``slot`` to the master on ``to_port`` the way ``redis-cli --cluster reshard`` does; keys moved."""
        source_port = self.owner(slot)[1]
        if source_port == to_port:
            return 0
        self.begin_migration(slot, to_port)
        moved = 0
        with self.client(source_port) as source:
            while keys := source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, keys_per_step):
                source.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 10000, "KEYS", *keys)
                moved += len(keys)
        self.finish_migration(slot, to_port)
        return moved

    def _ids(self, slot: int, to_port: int) -> tuple[int, str, str]:
        source_id, source_port = self.owner(slot)
        target_id = next(i for i, n in self.topology().items() if n["port"] == to_port)
        return source_port, source_id, target_id

    def begin_migration(self, slot: int, to_port: int) -> None:
        """The target imports ``slot``, the source migrates it: from now on the keys may be on either."""
        source_port, source_id, target_id = self._ids(slot, to_port)
        with self.client(source_port) as source, self.client(to_port) as target:
            target.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
            source.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)

    def move_keys(self, slot: int, to_port: int, keys: list[str]) -> None:
        with self.client(self.owner(slot)[1]) as source:
            source.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 10000, "KEYS", *keys)

    def finish_migration(self, slot: int, to_port: int) -> None:
        """Every key left moves, then every master is told the target serves ``slot``."""
        source_port, _, target_id = self._ids(slot, to_port)
        with self.client(source_port) as source, self.client(to_port) as target:
            while keys := source.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100):
                source.execute_command("MIGRATE", "127.0.0.1", to_port, "", 0, 10000, "KEYS", *keys)
            target.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
            source.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        for _, port in self.masters():
            if port not in (source_port, to_port):
                with self.client(port) as other:
                    other.execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)

    def refusals(self) -> int:
        """TRYAGAIN and ASK replies the live masters have sent so far (INFO errorstats)."""
        total = 0
        for _, port in self.masters():
            with self.client(port) as c:
                stats = c.info("errorstats")
            total += sum(v["count"] for k, v in stats.items() if k in ("errorstat_TRYAGAIN", "errorstat_ASK"))
        return total

    def replica_of(self, port: int) -> PrivateRedis:
        """The replica of the master on ``port``."""
        nodes = self.topology()
        master_id = next(i for i, n in nodes.items() if n["port"] == port)
        replica_port = next(n["port"] for n in nodes.values() if n["master_id"] == master_id and not n["failed"])
        return next(n for n in self.nodes if n.port == replica_port)

    def kill_master(self, port: int) -> None:
        """SIGKILL the master on ``port`` and wait until a replica serves its slots."""
        index = next(i for i, n in enumerate(self.nodes) if n.port == port)
        slots = next(n["slots"] for n in self.topology().values() if n["port"] == port)
        self.nodes[index].kill()
        self.dead.add(index)

        def taken_over() -> bool:
            try:
                return all(self.owner(a)[1] != port for a, _ in slots) and self._state_ok(self._live_port())
            except Exception:
                return False

        _until(f"a replica took over the slots of the master on port {port}", taken_over)


def record(ctx: Any) -> dict[str, Any]:
    """The fleet test's handler: one line per run (time, item, token, pid) in $WORKHIVE_CLUSTER_LOG.

    One short O_APPEND write per line, so lines of several processes never interleave.
    """
    line = f"{time.time():.6f} {ctx.item.id} {ctx.item.token} {os.getpid()}\n"
    fd = os.open(os.environ["WORKHIVE_CLUSTER_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)
    # A little work (20 ms: at most 200 items/s for 4 workers), so the drain lasts through the faults.
    time.sleep(float(os.environ.get("WORKHIVE_CLUSTER_SLEEP", "0.02")))
    return {"token": ctx.item.token, "pid": os.getpid()}
