"""KV capacity: requests that do not fit wait in the queue; one larger than the cache is refused."""

from __future__ import annotations

import asyncio
import re

import aiohttp

from tests.simengine.conftest import DDTREE_B8, FAST, EngineFactory


def test_requests_wait_for_kv_capacity(engine_factory: EngineFactory) -> None:
    # speed 4: a request lasts long enough (~0.5 s) for all four to arrive while the first two run;
    # a decode log line every step shows the scheduler's running/waiting counts
    args = ["--sim-speed", "4", "--sim-kv-tokens", "700", "--enable-metrics", "--decode-log-interval", "1"]
    eng = engine_factory([*DDTREE_B8, *FAST, *args])
    eng.wait_ready(10)
    assert eng.get_json("/server_info")["max_total_num_tokens"] == 700

    async def run() -> list[int]:
        async with aiohttp.ClientSession() as session:

            async def one(i: int) -> int:
                body = {
                    "text": f"q{i}",
                    "sampling_params": {"max_new_tokens": 300, "ignore_eos": True, "temperature": 0},
                }
                async with session.post(eng.url + "/generate", json=body) as resp:
                    return int((await resp.json())["meta_info"]["completion_tokens"])

            return list(await asyncio.gather(*(one(i) for i in range(4))))

    assert asyncio.run(run()) == [300] * 4  # two fit at a time; the others queued, none failed
    lines = [ln for ln in eng.log().splitlines() if "Decode batch, #running-req:" in ln]
    running = [int(re.search(r"#running-req: (\d+)", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
    queued = [int(re.search(r"#queue-req: (\d+)", ln).group(1)) for ln in lines]  # type: ignore[union-attr]
    assert running and max(running) == 2, running  # 2 x 302 KV tokens fit in 700, 3 do not
    assert max(queued) >= 1, queued  # the others waited in the queue

    async def too_big() -> int:
        async with aiohttp.ClientSession() as session:
            body = {"text": "big", "sampling_params": {"max_new_tokens": 800, "temperature": 0}}
            async with session.post(eng.url + "/generate", json=body) as resp:
                return resp.status

    assert asyncio.run(too_big()) == 400
