"""The kv-overrun fault: output corrupted only while requests decode concurrently, in tree mode only."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from repro_py.simengine import tokenizer
from repro_py.simengine.faults import FaultError, parse_faults
from repro_py.simengine.process import Engine
from repro_py.simengine.scheduler import OVERRUN_PIECE
from tests.simengine.conftest import DDTREE_B8, FAST, EngineFactory

PROMPTS = [f"Describe city number {i} in a few sentences." for i in range(12)]


def test_parse() -> None:
    assert parse_faults(["kv-overrun"]).kv_overrun is True
    with pytest.raises(FaultError, match="kv-overrun takes no argument"):
        parse_faults(["kv-overrun:3"])


async def _generate(eng: Engine, texts: list[str], *, concurrent: bool) -> list[list[int]]:
    async def one(session: aiohttp.ClientSession, text: str) -> list[int]:
        body = {"text": text, "sampling_params": {"temperature": 0, "max_new_tokens": 40}}
        async with session.post(eng.url + "/generate", json=body) as resp:
            assert resp.status == 200
            ids: list[int] = (await resp.json())["output_ids"]
            return ids

    async with aiohttp.ClientSession() as session:
        if concurrent:
            return list(await asyncio.gather(*(one(session, t) for t in texts)))
        return [await one(session, t) for t in texts]


async def test_only_concurrent_requests_are_corrupted(engine_factory: EngineFactory) -> None:
    healthy = engine_factory([*DDTREE_B8, *FAST, "--sim-speed", "100"])
    broken = engine_factory([*DDTREE_B8, *FAST, "--sim-speed", "100", "--sim-fault", "kv-overrun"])
    healthy.wait_ready(20)
    broken.wait_ready(20)
    info = broken.get_json("/server_info")["sim"]
    assert info["faults"] == ["kv-overrun"] and "kv-overrun" in info["faults_active"]
    clean = await _generate(healthy, PROMPTS, concurrent=True)
    assert await _generate(healthy, PROMPTS, concurrent=False) == clean  # the healthy engine is batch-invariant
    assert await _generate(broken, PROMPTS, concurrent=False) == clean  # one at a time: never corrupted
    corrupted = await _generate(broken, PROMPTS, concurrent=True)
    assert sum(a != b for a, b in zip(corrupted, clean, strict=True)) >= len(PROMPTS) // 2
    assert "faults=kv-overrun" in broken.log()


def test_inactive_outside_tree_mode(engine_factory: EngineFactory) -> None:
    eng = engine_factory(["--speculative-algorithm", "DFLASH", "--speculative-dflash-block-size", "8", *FAST,
                          "--sim-fault", "kv-overrun"])  # fmt: skip
    eng.wait_ready(20)
    info = eng.get_json("/server_info")["sim"]
    assert info["faults"] == ["kv-overrun"] and "kv-overrun" not in info["faults_active"]


def test_overrun_piece_is_a_single_token() -> None:
    assert tokenizer.pieces(OVERRUN_PIECE) == [OVERRUN_PIECE]
