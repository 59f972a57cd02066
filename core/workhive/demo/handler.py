"""The demo's handler: summarise a text with the (fake) LLM API, using the leased credential.

It is a real HTTP client. With ``httpx`` installed (``make demo`` installs
it) it uses one ``httpx.AsyncClient`` per worker event loop, so connections
are reused and the call never blocks the loop that heartbeats; without
httpx it falls back to ``urllib.request`` in a thread, so the demo also runs
from a bare ``pip install workhive`` plus plugins.

What the API answered is mapped with ``workhive.credentials.classify``:
429 → ``RateLimited(retry_after=…)`` (the key cools down fleet-wide, the item
is retried without spending an attempt), 401/403 → ``AuthFailed`` (the key is
disabled, the item retried with another), 400 → ``Permanent`` (this text can
never succeed), anything else → an ordinary exception (retried with backoff).

>>> # workhive work demo-summaries --handler workhive.demo.handler:summarise --credentials env:WORKHIVE_DEMO_KEY
"""

from __future__ import annotations

import asyncio
import json
import os
import urllib.error
import urllib.request
import weakref
from typing import Any

from workhive.credentials import Outcome, classify
from workhive.errors import AuthFailed, Permanent, RateLimited

__all__ = ["API_URL_ENV", "summarise"]

#: where the handler finds the API when the credential carries no base_url
API_URL_ENV = "WORKHIVE_DEMO_API_URL"
TIMEOUT = 30.0

try:
    import httpx
except ImportError:  # the stdlib fallback below is used
    httpx = None  # type: ignore[assignment]

_clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


def _client() -> Any:
    """The httpx client of the running event loop (a client must not cross loops)."""
    loop = asyncio.get_running_loop()
    client = _clients.get(loop)
    if client is None:
        client = _clients[loop] = httpx.AsyncClient(timeout=TIMEOUT)
    return client


async def _post_httpx(url: str, key: str, body: dict[str, Any]) -> tuple[int, dict[str, str], str]:
    response = await _client().post(url, json=body, headers={"Authorization": f"Bearer {key}"})
    return response.status_code, dict(response.headers), response.text


def _post_urllib(url: str, key: str, body: dict[str, Any]) -> tuple[int, dict[str, str], str]:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT) as response:
            return response.status, dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as err:  # 4xx/5xx arrive as exceptions; they are answers here
        return err.code, dict(err.headers), err.read().decode(errors="replace")


async def summarise(ctx: Any) -> dict[str, Any]:
    """Summarise ``ctx.data["text"]``; returns ``{"summary", "words", "credential"}``."""
    credential = ctx.credential
    if credential is None:
        raise RuntimeError("the demo handler needs a credential: run it with --credentials env:WORKHIVE_DEMO_KEY")
    base = credential.base_url or os.environ.get(API_URL_ENV)
    if not base:
        raise RuntimeError(f"no API URL: set {API_URL_ENV} or the credential's base URL")
    url = base.rstrip("/") + "/v1/summarize"
    body = {"text": ctx.data["text"]}
    key = credential.secret.reveal()
    if httpx is not None:
        status, headers, text = await _post_httpx(url, key, body)
    else:
        status, headers, text = await asyncio.to_thread(_post_urllib, url, key, body)

    verdict = classify(status=status, headers=headers, body=text)
    if verdict.outcome is Outcome.OK:
        answer = json.loads(text)
        return {"summary": answer["summary"], "words": answer["words"], "credential": credential.name}
    if verdict.outcome in (Outcome.RATE_LIMITED, Outcome.QUOTA_EXHAUSTED):
        raise RateLimited(retry_after=verdict.retry_after)
    if verdict.outcome is Outcome.AUTH_FAILED:
        raise AuthFailed(reason=verdict.reason)
    if status == 400:
        raise Permanent(f"the API refused this text: {text[:200]}")
    raise RuntimeError(f"API call failed: {verdict.reason or f'HTTP {status}'}")
