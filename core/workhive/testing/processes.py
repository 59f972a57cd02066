"""Helpers for tests that start processes and servers: a free TCP port, a process's children.

>>> port = free_port()            # for a private server or an HTTP endpoint
>>> children_of(os.getpid())      # doctest: +SKIP
[]
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

__all__ = ["children_of", "free_port"]


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on at this moment (the kernel picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def children_of(pid: int) -> list[int]:
    """The live (not zombie) child processes of ``pid``, read from ``/proc`` (Linux)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue  # the process ended while we looked
            # The command name may hold spaces and parentheses: the fields after its last ")" are fixed.
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == pid and fields[0] != "Z":
                found.append(int(entry))
    return found
