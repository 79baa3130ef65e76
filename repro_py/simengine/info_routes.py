"""The simulated engine's status and info routes, as sglang 0.5.23 answers them: /health, /ready, /ping, the
models, /model_info, /server_info (every resolved server argument), /tokenize, /flush_cache and /metrics."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from repro_py.simengine import sglang_reference, tokenizer
from repro_py.simengine.httputil import json_response as _json
from repro_py.simengine.httputil import read_json as _read_json
from repro_py.simengine.settings import SGLANG_VERSION
from repro_py.simengine.state import EngineState


class InfoRoutes:
    """The status and info handlers of one engine."""

    def __init__(self, state: EngineState) -> None:
        self.state = state
        self.settings = state.settings

    async def health(self, request: web.Request) -> web.Response:
        if self.state.phase == "ready" and self.settings.health_seconds > 0:
            await asyncio.sleep(self.settings.health_seconds)  # sglang: 1 s sleep + a 1-token generation
        return web.Response(status=200 if self.state.phase == "ready" else 503)

    async def ready(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.state.phase == "ready" else 503)

    async def ping(self, request: web.Request) -> web.Response:
        return web.Response(status=200 if self.state.phase in ("ready", "warmup") else 503)

    def model_card(self) -> dict[str, Any]:
        return {
            "id": self.settings.served_model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang (SIMULATED: repro_py.simengine)",
            "root": self.settings.served_model_name,
            "parent": None,
            "max_model_len": self.settings.context_length,
        }

    async def models(self, request: web.Request) -> web.Response:
        return _json({"object": "list", "data": [self.model_card()]})

    async def model_one(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.settings.served_model_name:
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
        return _json(self.model_card())

    async def model_info(self, request: web.Request) -> web.Response:
        return _json(
            {
                "model_path": self.settings.model_path,
                "served_model_name": self.settings.served_model_name,
                "tokenizer_path": self.settings.model_path,
                "is_generation": True,
                "preferred_sampling_params": None,
                "weight_version": "default",
                "load_format": "auto",
                "reasoning_parser": self.settings.reasoning_parser,
                "tool_call_parser": self.settings.args.get("tool_call_parser"),
                "disaggregation_mode": "null",
                "has_image_understanding": False,
                "has_audio_understanding": False,
                "model_type": "kimi_k2",
                "architectures": ["DeepseekV3ForCausalLM"],
                "simulated": True,
            }
        )

    def resolved_args(self) -> dict[str, Any]:
        """Every ServerArgs field of sglang 0.5.23 (+ the patch series), in its order: the engine's own
        resolved values where it has them, the wheel's defaults for the rest (``sglang_reference``)."""
        defaults = sglang_reference.server_args_defaults()
        args = self.settings.args
        return {name: args.get(name, defaults.get(name)) for name in sglang_reference.server_args_fields()}

    async def server_info(self, request: web.Request) -> web.Response:
        resolved = self.resolved_args()
        internal: dict[str, Any] = {
            **resolved,
            "world_size": self.settings.args["tp_size"] * self.settings.args["dp_size"],
            "effective_max_running_requests_per_dp": self.settings.max_running_requests,
            "last_gen_throughput": self.state.metrics.gen_throughput,
            "memory_usage": {"token_capacity": self.settings.kv_tokens, "simulated": True},
        }
        avg = self.state.metrics.avg_spec_accept_length()
        if avg is not None:
            internal["avg_spec_accept_length"] = avg
        body = {  # the key order of sglang's build_server_info + server_info route
            **resolved,
            "launch_command": self.settings.launch_command,
            "status": "ready",
            "max_total_num_tokens": self.settings.kv_tokens,
            "max_req_input_len": self.settings.context_length - 1,
            "startup_time": self.state.started,
            "hicache_object_layout": None,
            "kv_events": None,
            "internal_states": [internal],
            "version": SGLANG_VERSION,
            "frontend": "python",
            "simulated": True,  # the SIMULATED additions (sglang_reference.SIMULATED_SERVER_INFO_KEYS)
            "sim": self.state.sim_info(),
        }
        return _json(body)

    async def tokenize(self, request: web.Request) -> web.Response:
        body = await _read_json(request)
        if isinstance(body, web.Response):
            return body
        prompt = body.get("prompt", body.get("text", ""))
        limit = self.settings.context_length
        if isinstance(prompt, list):
            batch = [tokenizer.encode(str(p)) for p in prompt]
            return _json({"tokens": batch, "count": [len(i) for i in batch], "max_model_len": limit})
        ids = tokenizer.encode(str(prompt))
        return _json({"tokens": ids, "count": len(ids), "max_model_len": limit})

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.state.scheduler.active:
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

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(
            text=self.state.metrics.prometheus_text(),
            content_type="text/plain",
            charset="utf-8",
            headers={"X-Prometheus-Format": "0.0.4"},
        )

    def register(self, r: web.UrlDispatcher) -> None:
        """Add the routes (``/metrics`` only with ``--enable-metrics``)."""
        for path in ("/health", "/health_generate"):
            r.add_get(path, self.health)
        r.add_get("/ready", self.ready)
        r.add_get("/ping", self.ping)
        r.add_get("/v1/models", self.models)
        r.add_get("/v1/models/{model:.+}", self.model_one)
        for path in ("/model_info", "/get_model_info"):
            r.add_get(path, self.model_info)
        for path in ("/server_info", "/get_server_info"):
            r.add_get(path, self.server_info)
        for path in ("/tokenize", "/v1/tokenize"):
            r.add_post(path, self.tokenize)
        r.add_route("GET", "/flush_cache", self.flush_cache)
        r.add_route("POST", "/flush_cache", self.flush_cache)
        if self.settings.enable_metrics:
            r.add_get("/metrics", self.metrics)
