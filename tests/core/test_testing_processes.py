"""``workhive.testing.processes``: the helpers every plugin's process and restart tests share."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from workhive.testing.processes import children_of, free_port


def test_free_port_is_a_port_a_server_can_listen_on() -> None:
    port = free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
        server.listen()
        with socket.create_connection(("127.0.0.1", port), timeout=30):
            pass


def _state(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def test_children_of_lists_live_children_and_leaves_out_zombies_and_strangers() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        assert child.pid in children_of(os.getpid())
        assert child.pid not in children_of(os.getppid())  # a grandchild of our parent is not its child
        child.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + 60  # a bound on waiting for the kernel, not an assertion on time
        while _state(child.pid) != "Z" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert _state(child.pid) == "Z", "the killed child never became a zombie"
        assert child.pid not in children_of(os.getpid())
    finally:
        child.kill()
        child.wait()
