"""The dashboard's web application: one HTML page, a JSON API, and two actions.

``GET /`` the page; ``GET /api/overview`` pools, workers, credentials;
``GET /api/history`` the charts' series over the last hour (``history``);
``GET /api/pools/{pool}/dead`` poisoned items; ``GET /api/pools/{pool}/items/{id}``
one item; ``GET /api/pools/{pool}/groups`` its groups (tenants: weights, limits,
budgets); ``POST /api/pools/{pool}/requeue`` and ``POST /api/pools/{pool}/purge``
the actions (CSRF-protected, see ``security``). Every error is JSON with a
message (``{"error": …}``): 400 bad input, 401/403 refused, 404 no hive at the
storage URL (nothing is created: see ``holder``) or unknown pool or item, 409
an item that is no longer dead, 503 storage unreachable. Every answer carries
the headers of ``headers`` (CSP, no framing).
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp

from workhive.errors import HiveNotFound, InvalidArgument, NotFound, WorkhiveError
from workhive.hive import Hive
from workhive.models import ItemState
from workhive.plugin_manager import PluginManager
from workhive.urls import redact_url
from workhive_dashboard.headers import SecurityHeaders
from workhive_dashboard.history import History
from workhive_dashboard.holder import HiveHolder
from workhive_dashboard.security import COOKIE, check_action, check_read, is_the_token
from workhive_dashboard.settings import DashboardSettings
from workhive_dashboard.snapshot import RateTracker, dead_items, item_detail, overview, pool_groups, require_pool

__all__ = ["create_app"]

# uplot.min.*: the chart library, copied from its npm package by plugins/dashboard/assets (npm run build).
_STATIC = ("dashboard.js", "dashboard.css", "uplot.min.js", "uplot.min.css")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _page_refused(message: str) -> HTMLResponse:
    body = f"<!doctype html><title>workhive</title><p>{html.escape(message)}</p>"
    return HTMLResponse(body, 401, headers={"cache-control": "no-store"})


class _DashboardApp(Starlette):
    """Starlette with the security headers outside its error handling, so a 500 carries them too."""

    def build_middleware_stack(self) -> ASGIApp:
        return SecurityHeaders(super().build_middleware_stack())


def create_app(settings: DashboardSettings, *, manager: PluginManager | None = None) -> Starlette:
    """The ASGI app for ``settings`` (serve it with uvicorn, or test it with Starlette's TestClient).

    >>> app = create_app(DashboardSettings(storage="memory://demo"))  # doctest: +SKIP
    """
    holder = HiveHolder(settings, manager)
    rates = RateTracker()
    history = History()
    shown_url = redact_url(settings.storage)
    page = resources.files("workhive_dashboard").joinpath("static/index.html").read_text()
    static = {name: resources.files("workhive_dashboard").joinpath(f"static/{name}").read_bytes() for name in _STATIC}

    def scrub(text: str) -> str:
        # A driver's message may quote the URL it was given, password and all.
        return text.replace(settings.storage, shown_url) if settings.storage in text else text

    async def with_hive(request: Request, work: Callable[[Hive], Awaitable[Any]]) -> Response:
        refused = check_read(request, settings)
        if refused is not None:
            return _error(401 if settings.token is not None else 403, refused)
        try:
            hive = await holder.get()
        except HiveNotFound as exc:
            # Said as `workhive status` says it; the next request looks again (it may exist by then).
            return _error(404, scrub(str(exc)))
        except Exception as exc:
            return _error(503, scrub(f"cannot reach storage {shown_url}: {type(exc).__name__}: {exc}"))
        try:
            result = await work(hive)
            return result if isinstance(result, Response) else JSONResponse(result)
        except NotFound as exc:
            return _error(404, scrub(str(exc)))
        except InvalidArgument as exc:
            return _error(400, scrub(str(exc)))
        except WorkhiveError as exc:
            await holder.drop()  # reopen next time: the connection may be what broke
            return _error(503, scrub(f"storage {shown_url} failed: {type(exc).__name__}: {exc}"))
        except (OSError, ConnectionError) as exc:
            await holder.drop()
            return _error(503, scrub(f"storage {shown_url} failed: {type(exc).__name__}: {exc}"))

    async def index(request: Request) -> Response:
        token = request.query_params.get("token")
        if token is not None and settings.token is not None:
            if not is_the_token(token, settings):
                # No cookie is set or cleared: a link with a wrong token cannot end the session the
                # browser already has.
                return _page_refused(
                    "the token in this link is not this dashboard's token, so nothing changed; "
                    "open the URL the dashboard printed when it started"
                )
            # Trade the token in the URL for a cookie, and take it out of the address bar and history.
            response = RedirectResponse("/", status_code=303, headers={"cache-control": "no-store"})
            response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
            return response
        refused = check_read(request, settings)
        if refused is not None:
            return _page_refused(refused)
        body = (
            page.replace("{{csrf}}", html.escape(settings.csrf))
            .replace("{{storage}}", html.escape(shown_url))
            .replace("{{refresh_ms}}", str(int(settings.refresh * 1000)))
        )
        return HTMLResponse(body, headers={"cache-control": "no-store"})

    async def asset(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in static:
            return _error(404, f"no file {name!r} here")
        kind = "text/javascript" if name.endswith(".js") else "text/css"
        return Response(static[name], media_type=kind, headers={"cache-control": "no-cache"})

    async def api_overview(request: Request) -> Response:
        async def work(hive: Hive) -> Any:
            return {"storage": shown_url, **(await overview(hive, rates))}

        return await with_hive(request, work)

    async def api_history(request: Request) -> Response:
        return await with_hive(request, lambda hive: _series(history))

    def _count(request: Request, name: str, default: int, maximum: int) -> int:
        raw = request.query_params.get(name, str(default))
        if not raw.isdigit() or int(raw) > maximum:
            raise InvalidArgument(f"{name} must be a whole number from 0 to {maximum}, got {raw!r}")
        return int(raw)

    async def api_dead(request: Request) -> Response:
        pool = request.path_params["pool"]

        async def work(hive: Hive) -> Any:
            limit = max(1, _count(request, "limit", 50, 1000))
            return await dead_items(hive, pool, limit, _count(request, "offset", 0, 10**9))

        return await with_hive(request, work)

    async def api_groups(request: Request) -> Response:
        pool = request.path_params["pool"]
        return await with_hive(request, lambda hive: pool_groups(hive, pool))

    async def api_item(request: Request) -> Response:
        pool, item_id = request.path_params["pool"], request.path_params["item_id"]
        return await with_hive(request, lambda hive: item_detail(hive, pool, item_id))

    async def _body(request: Request) -> dict[str, Any]:
        try:
            body = json.loads(await request.body() or b"{}")
        except ValueError:
            raise InvalidArgument("the request body must be a JSON object") from None
        if not isinstance(body, dict):
            raise InvalidArgument("the request body must be a JSON object")
        return body

    async def act(request: Request, work: Callable[[Hive], Awaitable[Any]]) -> Response:
        refused = check_action(request, settings)
        if refused is not None:
            return _error(403, refused)
        return await with_hive(request, work)

    async def api_requeue(request: Request) -> Response:
        pool = request.path_params["pool"]

        async def work(hive: Hive) -> Any:
            body = await _body(request)
            ids = body.get("ids")
            if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
                raise InvalidArgument('requeue takes {"ids": ["<item id>", …]} with at least one id')
            await require_pool(hive, pool)
            handle = hive.pool(pool)
            not_dead = []
            for item_id in ids:
                item = await handle.get(item_id)  # ItemNotFound → 404
                if item.state is not ItemState.POISONED:
                    not_dead.append(f"{item_id} is {item.state.value}")
            if not_dead:
                return _Conflict(f"nothing requeued: only poisoned items can be requeued ({'; '.join(not_dead)})")
            return {"requeued": await handle.requeue(ids)}

        return await act(request, work)

    async def api_purge(request: Request) -> Response:
        pool = request.path_params["pool"]

        async def work(hive: Hive) -> Any:
            body = await _body(request)
            older = body.get("older_than")
            if isinstance(older, bool) or not isinstance(older, (int, float)) or not 0 <= older < 10**10:
                raise InvalidArgument('purge takes {"older_than": SECONDS} (a number, 0 or more)')
            await require_pool(hive, pool)
            return {"purged": await hive.pool(pool).purge(float(older))}

        return await act(request, work)

    async def sampler() -> None:
        # The charts' samples are taken whether or not a page is open, so they hold the last hour.
        while True:
            try:
                await history.sample(await holder.get())
            except asyncio.CancelledError:
                raise
            except Exception:  # no hive yet, or storage away: the page says why (overview); a gap in the charts
                pass
            await asyncio.sleep(settings.sample_interval)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        task = asyncio.create_task(sampler())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            await holder.drop()

    routes = [
        Route("/", index),
        Route("/static/{name:str}", asset),
        Route("/api/overview", api_overview),
        Route("/api/history", api_history),
        Route("/api/pools/{pool:str}/dead", api_dead),
        Route("/api/pools/{pool:str}/groups", api_groups),
        Route("/api/pools/{pool:str}/items/{item_id:str}", api_item),
        Route("/api/pools/{pool:str}/requeue", api_requeue, methods=["POST"]),
        Route("/api/pools/{pool:str}/purge", api_purge, methods=["POST"]),
    ]
    app = _DashboardApp(routes=routes, lifespan=lifespan)
    app.state.settings = settings
    app.state.history = history
    return app


async def _series(history: History) -> dict[str, Any]:
    return history.series()


class _Conflict(JSONResponse):
    """A 409 answer produced inside an action (the item moved on: nothing was changed)."""

    def __init__(self, message: str) -> None:
        super().__init__({"error": message}, status_code=409)
