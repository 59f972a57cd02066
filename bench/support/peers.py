"""The installed version of each peer a bench compares against, read from its metadata.

A bench names a peer by the release it actually ran, never by what a comment
expects (a label once said "bullmq 3.x" while 2.25.4 was installed).
``bench/requirements.txt`` pins what ``make bench`` installs.

>>> peer("pip").startswith("pip ")
True
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["peer", "peers_line"]


def peer(distribution: str) -> str:
    """``"name X.Y.Z"`` for an installed distribution, ``"name (not installed)"`` otherwise."""
    try:
        return f"{distribution} {version(distribution)}"
    except PackageNotFoundError:
        return f"{distribution} (not installed)"


def peers_line(*distributions: str) -> str:
    """One line naming every peer's installed release, for a bench's header."""
    return "peers: " + ", ".join(peer(d) for d in distributions)
