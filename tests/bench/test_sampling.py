"""The benchmark measures at the sampling setting it is given: temperature and top_p in every request, recorded
in the result, refused when out of range; a server that refuses the setting fails every cell with its refusal."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from repro_py.bench import cli
from repro_py.bench.client import chat_body
from repro_py.bench.matrix import BenchSettings, run_matrix
from repro_py.endpoint import Endpoint
from repro_py.exitcodes import ExitCode
from repro_py.simengine.process import Engine
from repro_py.simengine.testing import ddtree_flags

Factory = Callable[[list[str]], Engine]
DFLASH = ["--speculative-algorithm", "DFLASH", "--speculative-dflash-block-size", "8"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"temperature": -1.0}, "temperature=-1.0: must be a finite number >= 0 (0 = greedy decoding)"),
        ({"temperature": math.inf}, "temperature=inf: must be a finite number >= 0"),
        ({"top_p": 0.0}, "top_p=0.0: must be a number in (0, 1]"),
        ({"top_p": 1.5}, "top_p=1.5: must be a number in (0, 1]"),
    ],
)
def test_out_of_range_sampling_is_refused_naming_the_value_and_the_range(
    kwargs: dict[str, float], message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        BenchSettings(**kwargs)  # type: ignore[arg-type]


def test_the_command_line_refuses_bad_sampling_before_any_request(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli.main(["--url", "http://127.0.0.1:1", "--temperature", "-0.5", "--top-p", "2"])
    assert rc == ExitCode.USAGE
    err = capsys.readouterr().err
    assert "temperature=-0.5: must be a finite number >= 0" in err and "top_p=2.0: must be a number in (0, 1]" in err


def test_every_request_carries_temperature_and_top_p() -> None:
    body = chat_body(Endpoint("http://x"), [{"role": "user", "content": "hi"}], max_tokens=8, temperature=0.7,
                     top_p=0.95)
    assert (body["temperature"], body["top_p"]) == (0.7, 0.95)
    assert BenchSettings().sampling.text == "T=0 (greedy), top_p=1"  # the default stays greedy


async def test_a_sampled_run_records_its_setting_and_a_ddtree_server_is_measured_at_it(
    engine_factory: Factory,
) -> None:
    settings = BenchSettings(contexts=(60,), concurrency=(1, 2), repeats=1, max_tokens=16, warmup=1,
                             temperature=0.7, top_p=0.95)
    dflash = await run_matrix(Endpoint(engine_factory([*DFLASH, "--sim-speed", "100"]).url), settings)
    assert dflash["sampling"] == {"temperature": 0.7, "top_p": 0.95}
    assert (dflash["settings"]["temperature"], dflash["settings"]["top_p"]) == (0.7, 0.95)
    assert [c["status"] for c in dflash["cells"]] == ["ok", "ok"]

    ddtree = await run_matrix(
        Endpoint(engine_factory([*ddtree_flags(), "--sim-speed", "100", "--enable-metrics"]).url), settings
    )
    assert ddtree["sampling"] == {"temperature": 0.7, "top_p": 0.95}
    assert [c["status"] for c in ddtree["cells"]] == ["ok", "ok"], [c.get("reason") for c in ddtree["cells"]]
    for cell in ddtree["cells"]:
        assert cell["median"]["output_tps"] > 0
        assert cell["median"]["accept_length"] > 1.0  # measured from the server's counters at T=0.7
    assert ddtree["server_lost"] is None
