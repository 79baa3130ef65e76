"""sglang's native /generate route (POST and PUT), whole or streamed, with its ``meta_info`` (speculative
acceptance figures included)."""

from __future__ import annotations

import time
from typing import Any

from aiohttp import web

from repro_py.simengine import contract, intake, tokenizer, validation
from repro_py.simengine import openai_shapes as shapes
from repro_py.simengine.generation import Generation
from repro_py.simengine.httputil import BadRequest, validated_body
from repro_py.simengine.httputil import json_response as _json
from repro_py.simengine.scheduler import Request


class GenerateRoute:
    """The handler of /generate on one engine."""

    def __init__(self, gen: Generation) -> None:
        self.gen = gen
        self.settings = gen.settings

    def meta_info(self, req: Request, done: bool) -> dict[str, Any]:
        settings = self.settings
        fr: dict[str, Any] | None = None
        if done:
            reason = req.finish_reason
            fr = (
                {"type": "abort", "message": self.gen.fault_message(req)}
                if reason == "abort"
                else {"type": "length", "length": req.emitted}
                if reason == "length"
                else {"type": "stop", "matched": req.plan.matched_stop}
            )
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": fr,
            "prompt_tokens": req.prompt_tokens,
            "weight_version": "default",
            "num_retractions": 0,
            "reasoning_tokens": 0,
            "completion_tokens": req.emitted,
            "cached_tokens": 0,
        }
        if done:
            meta["e2e_latency"] = (req.finished_at or time.time()) - req.created
            meta["response_sent_to_client_ts"] = time.time()
            if settings.spec.algorithm != "none" and req.verify_ct > 0:
                drafts = max(1, self.gen.state.model_cfg.verify_width - 1)
                correct = req.accept_tokens - req.verify_ct
                meta.update(
                    spec_accept_rate=correct / (req.verify_ct * drafts),
                    spec_accept_length=req.emitted / req.verify_ct,
                    spec_num_correct_drafts=correct,
                    spec_num_proposed_drafts=req.verify_ct * drafts,
                    spec_verify_ct=req.verify_ct,
                )
            meta["sim_speed"] = settings.speed
        return meta

    async def generate(self, request: web.Request) -> web.StreamResponse:
        body = await validated_body(request, validation.GENERATE_PATH, content_type=False)
        if isinstance(body, web.Response):
            return body
        violation = contract.generate_contract_error(body)
        if violation is not None:
            return _json({"error": violation}, 400)
        try:
            req = self.gen.start(intake.generate(self.settings, body))
        except BadRequest as exc:
            if body.get("stream"):  # sglang's stream_results: the error as an event of a 200 stream
                return await shapes.sse_error_stream(request, str(exc))
            return _json({"error": {"message": str(exc)}}, 400)
        if body.get("rid"):
            req.rid = str(body["rid"])
        if not req.streaming:
            await self.gen.drain(req, request)
            out = req.plan.pieces[: req.emitted]
            return _json(
                {
                    "text": "".join(out),
                    "output_ids": [tokenizer.token_id(p) for p in out],
                    "meta_info": self.meta_info(req, True),
                }
            )
        resp = await shapes.sse_start(request)
        acc = ""
        ids: list[int] = []
        async for pieces in self.gen.chunks(req, request):
            acc += "".join(pieces)
            ids += [tokenizer.token_id(p) for p in pieces]
            done = shapes.is_last(req)
            await shapes.send(resp, {"text": acc, "output_ids": ids, "meta_info": self.meta_info(req, done)})
        await shapes.send(resp, b"[DONE]")
        await resp.write_eof()
        return resp
