"""Serving the dashboard: bind the socket first (so a port in use is a clear error), then run uvicorn on it."""

from __future__ import annotations

import errno
import socket

from workhive.errors import ConfigError
from workhive.plugin_manager import PluginManager
from workhive_dashboard.settings import DashboardSettings

__all__ = ["bind", "serve"]


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port``; ``ConfigError`` saying what to do when that is impossible."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot bind the dashboard to {host!r}: {exc.strerror}; give --host an address") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise ConfigError(
                f"port {port} on {host} is in use (another dashboard, or another program); "
                "pick another with --port, or --port 0 for any free one"
            ) from None
        raise ConfigError(f"cannot bind the dashboard to {host}:{port}: {exc.strerror}") from None
    sock.set_inheritable(False)
    return sock


def serve(settings: DashboardSettings, sock: socket.socket, manager: PluginManager | None = None) -> None:
    """Serve the dashboard on ``sock`` until interrupted (Ctrl-C or SIGTERM)."""
    import uvicorn

    from workhive_dashboard.app import create_app

    config = uvicorn.Config(create_app(settings, manager=manager), log_level="warning", lifespan="on")
    uvicorn.Server(config).run(sockets=[sock])
