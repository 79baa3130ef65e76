"""A cell above the server's running-request cap is marked queued, never reported as throughput there.

sglang 0.5.23 caps DFLASH (and DDTree, its tree mode) at 48 running requests
unless --max-running-requests is set; a concurrency-64 cell then measures 48
running plus 16 waiting.
"""

from __future__ import annotations

from collections.abc import Callable

from repro_py.bench.matrix import BenchSettings, cell_ok, mark_queued, run_matrix
from repro_py.bench.server_info import ServerInfo
from repro_py.endpoint import Endpoint
from repro_py.simengine.process import Engine
from repro_py.simengine.testing import ddtree_flags

Factory = Callable[[list[str]], Engine]


def test_the_cap_is_the_schedulers_summed_over_dp_ranks():
    per_rank = {"internal_states": [{"effective_max_running_requests_per_dp": 48}] * 2, "max_running_requests": 96}
    assert ServerInfo(raw=per_rank, path="/server_info").running_cap == 96
    assert ServerInfo(raw={"max_running_requests": 48}, path="/server_info").running_cap == 48
    assert ServerInfo(raw={"internal_states": [{}]}, path="/server_info").running_cap is None


def test_only_cells_above_the_cap_are_queued():
    below = {"concurrency": 48, "status": "ok", "reason": None}
    above = {"concurrency": 64, "status": "ok", "reason": None}
    mark_queued(below, 48)
    mark_queued(above, 48)
    assert below["status"] == "ok" and below["queued"] is False and below["running_cap"] == 48
    assert above["status"] == "queued" and above["queued"] is True
    assert "above the server's running-request cap 48: 16 requests waited" in above["reason"]
    assert cell_ok(above)  # a queued cell is not a failed measurement; it is just not throughput at 64
    unknown = {"concurrency": 64, "status": "ok", "reason": None}
    mark_queued(unknown, None)
    assert unknown["status"] == "ok" and unknown["queued"] is False


async def test_a_concurrency_above_the_dflash_cap_is_queued(engine_factory: Factory) -> None:
    eng = engine_factory([*ddtree_flags(), "--sim-speed", "400", "--max-running-requests", "4"])
    settings = BenchSettings(contexts=(60,), concurrency=(2, 6), repeats=1, max_tokens=16, warmup=0)
    result = await run_matrix(Endpoint(eng.url), settings)
    assert result["engine"]["running_cap"] == 4
    by = {c["concurrency"]: c for c in result["cells"]}
    assert by[2]["status"] == "ok" and by[2]["queued"] is False
    assert by[6]["status"] == "queued" and by[6]["running_cap"] == 4
    assert "concurrency 6 is above the server's running-request cap 4" in by[6]["reason"]
