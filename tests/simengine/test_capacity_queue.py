"""KV capacity: requests that do not fit wait in the queue; one larger than the cache is refused."""

from __future__ import annotations

import asyncio

import aiohttp

from tests.simengine.conftest import DDTREE_B8, FAST, EngineFactory


def test_requests_wait_for_kv_capacity(engine_factory: EngineFactory) -> None:
    eng = engine_factory([*DDTREE_B8, *FAST, "--sim-speed", "50", "--sim-kv-tokens", "700", "--enable-metrics"])
    eng.wait_ready(10)
    assert eng.get_json("/server_info")["max_total_num_tokens"] == 700

    async def run() -> list[int]:
        async with aiohttp.ClientSession() as session:

            async def one(i: int) -> int:
                body = {"text": f"q{i}", "sampling_params": {"max_new_tokens": 300, "ignore_eos": True}}
                async with session.post(eng.url + "/generate", json=body) as resp:
                    return int((await resp.json())["meta_info"]["completion_tokens"])

            return list(await asyncio.gather(*(one(i) for i in range(4))))

    assert asyncio.run(run()) == [300] * 4  # two fit at a time; the others queued, none failed

    async def too_big() -> int:
        async with aiohttp.ClientSession() as session:
            body = {"text": "big", "sampling_params": {"max_new_tokens": 800}}
            async with session.post(eng.url + "/generate", json=body) as resp:
                return resp.status

    assert asyncio.run(too_big()) == 400
