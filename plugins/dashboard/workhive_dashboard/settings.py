"""``DashboardSettings``: where the dashboard reads from and who may talk to it."""

from __future__ import annotations

import ipaddress
import secrets

import attrs

from workhive.errors import ConfigError

__all__ = ["DEFAULT_PORT", "DashboardSettings", "is_loopback"]

DEFAULT_PORT = 8177


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the dashboard on this machine (127.0.0.0/8, ::1, localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _check_port(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value.__class__ is not int or not 0 <= value <= 65535:
        raise ConfigError(f"dashboard port must be a whole number from 0 to 65535, got {value!r}")


def _check_refresh(instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not 0.2 <= value <= 3600:
        raise ConfigError(f"dashboard refresh must be between 0.2 and 3600 seconds, got {value!r}")


@attrs.frozen
class DashboardSettings:
    """What one dashboard serves.

    ``token``: required from every request when ``host`` is not a loopback
    address (a random one is made when none is given); optional on loopback.
    ``csrf``: a per-process secret the page sends back with every action, so
    a page on another site cannot make the browser requeue or purge.

    >>> DashboardSettings(storage="memory://").host
    '127.0.0.1'
    """

    storage: str
    host: str = "127.0.0.1"
    port: int = attrs.field(default=DEFAULT_PORT, validator=_check_port)
    token: str | None = attrs.field(default=None, repr=False)
    refresh: float = attrs.field(default=2.0, validator=_check_refresh)
    locks: str | None = None
    csrf: str = attrs.field(factory=lambda: secrets.token_urlsafe(24), repr=False)

    @property
    def sample_interval(self) -> float:
        """Seconds between the charts' samples: the page's refresh, at least one second."""
        return max(1.0, self.refresh)

    def __attrs_post_init__(self) -> None:
        if self.token is not None and len(self.token) < 16:
            raise ConfigError("a dashboard token must be at least 16 characters; use a random one")

    @property
    def needs_token(self) -> bool:
        return self.token is not None or not is_loopback(self.host)

    def with_token(self) -> DashboardSettings:
        """These settings, with a random token made up if one is needed and none was given."""
        if self.token is None and not is_loopback(self.host):
            return attrs.evolve(self, token=secrets.token_urlsafe(24))
        return self
