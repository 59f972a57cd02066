"""Who may read the dashboard and who may act through it.

* Off loopback, every request carries the token: ``Authorization: Bearer``,
  or the cookie set when the page is first opened as ``/?token=…``.
* On loopback, the Host header must name a loopback address, so a web page
  elsewhere cannot reach the dashboard through DNS rebinding.
* An action (POST) must send back the page's CSRF secret in a header and come
  from the dashboard's own origin (``Origin``, and the browser's
  ``Sec-Fetch-Site``): a form or script on another site can do neither.
* ``/?token=…`` sets the cookie only for the right token, so a link with a
  wrong one cannot replace (log out) a session.
"""

from __future__ import annotations

import hmac
from urllib.parse import urlsplit

from starlette.requests import Request

from workhive_dashboard.settings import DashboardSettings, is_loopback

__all__ = ["COOKIE", "CSRF_HEADER", "check_action", "check_read", "is_the_token"]

COOKIE = "workhive_dashboard_token"
CSRF_HEADER = "x-workhive-csrf"


def _same(a: str | None, b: str) -> bool:
    return a is not None and hmac.compare_digest(a.encode(), b.encode())


def is_the_token(offered: str | None, settings: DashboardSettings) -> bool:
    """Whether ``offered`` is this dashboard's token (compared in constant time; False when it has none)."""
    return settings.token is not None and _same(offered, settings.token)


def check_read(request: Request, settings: DashboardSettings) -> str | None:
    """Why this request may not read the dashboard (a message for a 401/403), or None."""
    host = urlsplit(f"//{request.headers.get('host', '')}").hostname or ""
    if not settings.needs_token and not is_loopback(host):
        return f"this dashboard answers only on loopback addresses, not for host {host!r}"
    if settings.token is None:
        return None
    auth = request.headers.get("authorization", "")
    offered = auth[7:] if auth.lower().startswith("bearer ") else request.cookies.get(COOKIE)
    if is_the_token(offered, settings):
        return None
    return "this dashboard needs its token: open it as /?token=TOKEN or send 'Authorization: Bearer TOKEN'"


def check_action(request: Request, settings: DashboardSettings) -> str | None:
    """Why this POST may not act (a message for a 403), or None."""
    if not _same(request.headers.get(CSRF_HEADER), settings.csrf):
        return "actions must come from the dashboard page itself (missing or wrong CSRF header); reload the page"
    # Browsers name where a request comes from; the page's own fetch is "same-origin". Another port on
    # this host is "same-site" but still another origin, and "none" is no page at all: all refused.
    fetched_from = request.headers.get("sec-fetch-site")
    if fetched_from is not None and fetched_from != "same-origin":
        return f"actions from another origin (Sec-Fetch-Site: {fetched_from}) are refused; use the dashboard page"
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc != request.headers.get("host"):
        return f"actions from another origin ({origin}) are refused; use the dashboard page"
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        return "actions take a JSON body (Content-Type: application/json)"
    return None
