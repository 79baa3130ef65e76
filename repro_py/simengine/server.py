"""HTTP surface of the simulated engine: sglang 0.5.23 paths and JSON shapes on aiohttp.

This module holds the app, the API-key check, the SIMULATED header and the
status/info routes; generation lives in ``generation``.
"""

from __future__ import annotations

import asyncio
import hmac
import time
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from repro_py.simengine import sglang_reference, tokenizer
from repro_py.simengine.generation import add_generation_routes, wait_warmup
from repro_py.simengine.httputil import json_response as _json
from repro_py.simengine.httputil import read_json as _read_json
from repro_py.simengine.scheduler import Request
from repro_py.simengine.settings import SGLANG_VERSION
from repro_py.simengine.state import EngineState

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
_AUTH_EXEMPT = ("/health", "/ready", "/metrics")
_ADMIN_PATHS = ("/flush_cache",)


def build_app(state: EngineState) -> web.Application:
    settings = state.settings

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

    app = web.Application(middlewares=[auth, http_errors], client_max_size=64 * 1024 * 1024)

    async def stamp(request: web.Request, response: web.StreamResponse) -> None:
        response.headers["X-SGLang-Simulated"] = "true"
        response.headers["X-SGLang-Sim-Speed"] = f"{settings.speed:g}"

    app.on_response_prepare.append(stamp)

    async def health(request: web.Request) -> web.Response:
        if state.phase == "ready" and settings.health_seconds > 0:
            await asyncio.sleep(settings.health_seconds)  # sglang: 1 s sleep + a 1-token generation
        return web.Response(status=200 if state.phase == "ready" else 503)

    async def ready(request: web.Request) -> web.Response:
        return web.Response(status=200 if state.phase == "ready" else 503)

    async def ping(request: web.Request) -> web.Response:
        return web.Response(status=200 if state.phase in ("ready", "warmup") else 503)

    def model_card() -> dict[str, Any]:
        return {
            "id": settings.served_model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang (SIMULATED: repro_py.simengine)",
            "root": settings.served_model_name,
            "parent": None,
            "max_model_len": settings.context_length,
        }

    async def models(request: web.Request) -> web.Response:
        return _json({"object": "list", "data": [model_card()]})

    async def model_one(request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != settings.served_model_name:
            return _json(
                {
                    "error": {
                        "message": f"The model '{name}' does not exist",
                        "type": "invalid_request_error",
                        "param": "model",
                        "code": "model_not_found",
                    }
                },
                404,
            )
        return _json(model_card())

    async def model_info(request: web.Request) -> web.Response:
        return _json(
            {
                "model_path": settings.model_path,
                "served_model_name": settings.served_model_name,
                "tokenizer_path": settings.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "load_format": "auto",
                "reasoning_parser": settings.reasoning_parser,
                "tool_call_parser": settings.args.get("tool_call_parser"),
                "disaggregation_mode": "null",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "kimi_k2",
                "architectures": ["DeepseekV3ForCausalLM"],
                "simulated": True,
            }
        )

    def resolved_args() -> dict[str, Any]:
        """Every ServerArgs field of sglang 0.5.23 (+ the patch series), in its order: the engine's own
        resolved values where it has them, the wheel's defaults for the rest (``sglang_reference``)."""
        defaults = sglang_reference.server_args_defaults()
        return {name: settings.args.get(name, defaults.get(name)) for name in sglang_reference.server_args_fields()}

    async def server_info(request: web.Request) -> web.Response:
        resolved = resolved_args()
        internal: dict[str, Any] = {
            **resolved,
            "world_size": settings.args["tp_size"] * settings.args["dp_size"],
            "effective_max_running_requests_per_dp": settings.max_running_requests,
            "last_gen_throughput": state.metrics.gen_throughput,
            "memory_usage": {"token_capacity": settings.kv_tokens, "simulated": True},
        }
        avg = state.metrics.avg_spec_accept_length()
        if avg is not None:
            internal["avg_spec_accept_length"] = avg
        body = {  # the key order of sglang's build_server_info + server_info route
            **resolved,
            "launch_command": settings.launch_command,
            "status": "ready",
            "max_total_num_tokens": settings.kv_tokens,
            "max_req_input_len": settings.context_length - 1,
            "startup_time": state.started,
            "hicache_object_layout": None,
            "kv_events": None,
            "internal_states": [internal],
            "version": SGLANG_VERSION,
            "frontend": "python",
            "simulated": True,  # the SIMULATED additions (sglang_reference.SIMULATED_SERVER_INFO_KEYS)
            "sim": state.sim_info(),
        }
        return _json(body)

    async def tokenize(request: web.Request) -> web.Response:
        body = await _read_json(request)
        if isinstance(body, web.Response):
            return body
        prompt = body.get("prompt", body.get("text", ""))
        if isinstance(prompt, list):
            batch = [tokenizer.encode(str(p)) for p in prompt]
            return _json({"tokens": batch, "count": [len(i) for i in batch], "max_model_len": settings.context_length})
        ids = tokenizer.encode(str(prompt))
        return _json({"tokens": ids, "count": len(ids), "max_model_len": settings.context_length})

    async def flush_cache(request: web.Request) -> web.Response:
        if state.scheduler.active:
            return web.Response(
                status=400,
                text="Cache not flushed. Please check backend logs for more details. "
                "(When there are running or waiting requests, the operation will not be performed.)\n",
            )
        return web.Response(
            status=200,
            text="Cache flushed.\nPlease check backend logs for more details. (When "
            "there are running or waiting requests, the operation will not be performed.)\n",
        )

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(
            text=state.metrics.prometheus_text(),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Prometheus-Format": "0.0.4"},
        )

    r = app.router
    for path in ("/health", "/health_generate"):
        r.add_get(path, health)
    r.add_get("/ready", ready)
    r.add_get("/ping", ping)
    r.add_get("/v1/models", models)
    r.add_get("/v1/models/{model:.+}", model_one)
    for path in ("/model_info", "/get_model_info"):
        r.add_get(path, model_info)
    for path in ("/server_info", "/get_server_info"):
        r.add_get(path, server_info)
    for path in ("/tokenize", "/v1/tokenize"):
        r.add_post(path, tokenize)
    r.add_route("GET", "/flush_cache", flush_cache)
    r.add_route("POST", "/flush_cache", flush_cache)
    if settings.enable_metrics:
        r.add_get("/metrics", metrics)
    app["warmup"] = add_generation_routes(app, state)
    return app


def run_warmup(app: web.Application) -> Request:
    starter: Callable[[], Request] = app["warmup"]
    return starter()


__all__ = ["build_app", "run_warmup", "wait_warmup"]
