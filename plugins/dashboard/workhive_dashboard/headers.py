"""Security headers on every answer the dashboard gives: page, static files, API, errors.

The page runs only its own script and stylesheet (``/static/…``), so the
policy allows nothing inline. ``frame-ancestors 'none'`` and
``X-Frame-Options: DENY`` keep any other page (another local origin
included) from framing the dashboard and steering clicks into its buttons.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["CONTENT_SECURITY_POLICY", "SECURITY_HEADERS", "SecurityHeaders"]

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        # The page's icon is the empty `data:,` (so the browser asks for no /favicon.ico).
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "frame-ancestors 'none'",
        "base-uri 'none'",
        "form-action 'self'",
    ]
)

SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("content-security-policy", CONTENT_SECURITY_POLICY),
    # For browsers that predate frame-ancestors.
    ("x-frame-options", "DENY"),
    ("x-content-type-options", "nosniff"),
    # The first page load may carry ?token=…: no Referer may take it anywhere.
    ("referrer-policy", "no-referrer"),
    # No other origin may load an answer as a script, image or style (e.g. <script src=/api/overview>).
    ("cross-origin-resource-policy", "same-origin"),
)


class SecurityHeaders:
    """ASGI middleware: sets ``SECURITY_HEADERS`` on every HTTP response start, replacing any earlier value.

    >>> app = SecurityHeaders(starlette_app)  # doctest: +SKIP
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                names = {name.encode("latin-1") for name, _ in SECURITY_HEADERS}
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in names]
                added = [(name.encode("latin-1"), value.encode("latin-1")) for name, value in SECURITY_HEADERS]
                message = {**message, "headers": kept + added}
            await send(message)

        await self.app(scope, receive, send_with_headers)
