"""HTTP surface of the simulated engine: sglang 0.5.23 paths and JSON shapes on aiohttp.

This module holds the app, the API-key check, the SIMULATED header and the
routes' registration: the status/info routes are ``info_routes``, generation is
``generation`` with ``openai_routes`` and ``generate_route``.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from repro_py.simengine.generate_route import GenerateRoute
from repro_py.simengine.generation import Generation, wait_warmup
from repro_py.simengine.httputil import json_response as _json
from repro_py.simengine.info_routes import InfoRoutes
from repro_py.simengine.openai_routes import OpenAIRoutes
from repro_py.simengine.scheduler import Request
from repro_py.simengine.settings import Settings
from repro_py.simengine.state import EngineState

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_AUTH_EXEMPT = ("/health", "/ready", "/metrics")
_ADMIN_PATHS = ("/flush_cache",)


def auth_middleware(settings: Settings) -> Middleware:
    """The API-key check (the admin key on the admin paths); health, readiness and metrics are exempt."""

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if settings.api_key is None or request.method == "OPTIONS" or request.path.startswith(_AUTH_EXEMPT):
            return await handler(request)
        key = settings.api_key
        if request.path.startswith(_ADMIN_PATHS) and settings.admin_api_key:
            key = settings.admin_api_key
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(token.strip().encode(), key.encode()):
            return _json({"error": "Unauthorized"}, 401)
        return await handler(request)

    return auth


@web.middleware
async def http_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Starlette's bodies for an unknown path (404) and a known path with another method (405)."""
    try:
        return await handler(request)
    except web.HTTPMethodNotAllowed as exc:
        allow = ", ".join(sorted(exc.allowed_methods))
        return _json({"detail": "Method Not Allowed"}, 405, headers={"Allow": allow})
    except web.HTTPNotFound:
        return _json({"detail": "Not Found"}, 404)


def build_app(state: EngineState) -> web.Application:
    settings = state.settings
    app = web.Application(middlewares=[auth_middleware(settings), http_errors], client_max_size=64 * 1024 * 1024)

    async def stamp(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["X-SGLang-Simulated"] = "true"
        response.headers["X-SGLang-Sim-Speed"] = f"{settings.speed:g}"

    app.on_response_prepare.append(stamp)
    InfoRoutes(state).register(app.router)
    gen = Generation(state)
    openai, native = OpenAIRoutes(gen), GenerateRoute(gen)
    r = app.router
    r.add_post("/v1/chat/completions", openai.chat)
    r.add_post("/v1/completions", openai.completions)
    r.add_post("/generate", native.generate)
    r.add_put("/generate", native.generate)
    app["warmup"] = gen.warmup_starter()
    return app


def run_warmup(app: web.Application) -> Request:
    starter: Callable[[], Request] = app["warmup"]
    return starter()


__all__ = ["build_app", "run_warmup", "wait_warmup"]
