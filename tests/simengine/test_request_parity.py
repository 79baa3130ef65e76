"""The simulated engine answers every request body as sglang 0.5.23 does: same status, same error body.

The table (``repro_py/simengine/refgen_cases.py``) holds valid and invalid
bodies for ``/v1/chat/completions``, ``/v1/completions`` and ``/generate`` on a
plain DFLASH server and a DDTree one (patch 0010). sglang's verdict on each was
taken from sglang's own code (``sglang_oracle``: its HTTP routes and
validation handler, pydantic request models, serving layer, tokenizer manager,
``SamplingParams`` and the patched DDTree refusal) and recorded in
``sglang_reference.json`` by ``refgen``. Here every body goes to a real engine
process and its answer must equal the recorded one; with the CPU sglang venv,
``test_sglang_and_the_engine_agree_on_every_body`` takes sglang's verdicts live
instead of from the file. A body sglang admits must be admitted (200); for a
refused one the whole body must match (the directory sglang is installed in
aside: the engine names its own site-packages, as a server in its venv would).
"""

from __future__ import annotations

import json
import os
import sys
import sysconfig
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from repro_py.simengine import contract, refgen_protocol, sglang_reference
from repro_py.simengine.process import Engine
from repro_py.simengine.refgen_cases import REQUEST_CASES
from tests.simengine.test_http import KEY

REPO = Path(__file__).resolve().parents[2]
SGLANG_PYTHON = os.environ.get("SGLANG_CPU_PYTHON", str(REPO / ".venv-sglang-cpu" / "bin" / "python"))
CASES = sglang_reference.request_cases()


def _id(index: int, case: dict[str, Any]) -> str:
    sent = case.get("raw") or json.dumps(case.get("body"), separators=(",", ":"))
    return f"{index}-{case['mode']}-{case['path']}-{sent[:70]}"


def answer(eng: Engine, case: dict[str, Any]) -> dict[str, Any]:
    """The engine's status and body (JSON when it is JSON), its site-packages written ``{site_packages}``."""
    data = case["raw"] if "raw" in case else json.dumps(case["body"])
    headers = {"Content-Type": "application/json", **case.get("headers", {}), "Authorization": f"Bearer {KEY}"}
    req = urllib.request.Request(eng.url + case["path"], data=data.encode(), method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=60) as resp:
            status, raw = resp.status, resp.read()
    except urllib.error.HTTPError as err:
        status, raw = err.code, err.read()
    text = raw.decode().replace(json.dumps(sysconfig.get_paths()["purelib"])[1:-1], refgen_protocol.SITE_PACKAGES)
    try:
        body: Any = json.loads(text)
    except ValueError:
        body = text
    return {"status": status, "body": body}


def difference(expect: dict[str, Any], got: dict[str, Any]) -> str | None:
    """What differs between sglang's verdict and the engine's answer, or None."""
    if expect["status"] != got["status"]:
        return f"status: sglang {expect['status']}, engine {got['status']}: {str(got['body'])[:600]}"
    if expect.get("admitted"):
        return None  # sglang admitted it (the oracle generates nothing); the engine served it
    if expect["body"] != got["body"]:
        return f"body:\n  sglang {json.dumps(expect['body'])[:1500]}\n  engine {json.dumps(got['body'])[:1500]}"
    return None


def _engine(case: dict[str, Any], dflash: Engine, ddtree: Engine) -> Engine:
    return ddtree if case["mode"] == "ddtree" else dflash


def test_the_table_covers_every_layer_and_both_modes() -> None:
    assert len(CASES) >= 48
    assert [{k: v for k, v in c.items() if k != "expect"} for c in CASES] == [dict(c) for c in REQUEST_CASES], (
        "refgen_cases changed: regenerate sglang_reference.json (refgen --write)"
    )
    statuses = {c["expect"]["status"] for c in CASES}
    assert statuses == {200, 400, 500}
    assert {c["path"] for c in CASES} == {"/v1/chat/completions", "/v1/completions", "/generate"}
    assert sum(c["mode"] == "ddtree" for c in CASES) >= 20
    assert sum(bool(c["expect"].get("admitted")) for c in CASES) >= 20


def test_every_contract_decoder_of_sampling_params_is_read() -> None:
    """A SamplingParams key whose decoder this engine cannot read would be checked by nobody."""
    recorded = sglang_reference.contract()
    assert [k for k, _ in recorded["SamplingParams"]] == recorded["SamplingParams_fields"]
    decoders = recorded["SamplingParams"] + recorded["WatermarkRequestConfig"]
    unread = [k for k, e in decoders if not contract.understood(e)]
    assert unread == []
    top = dict(recorded["GenerateRequest"])
    assert all(contract.understood(top[k]) for k in contract.MODELED)


@pytest.mark.parametrize("case", CASES, ids=[_id(i, c) for i, c in enumerate(CASES)])
def test_the_engine_answers_each_body_as_sglang_does(
    case: dict[str, Any], dflash_engine: Engine, ddtree_engine: Engine
) -> None:
    found = difference(case["expect"], answer(_engine(case, dflash_engine, ddtree_engine), case))
    assert found is None, found


@pytest.mark.sglang_cpu
def test_sglang_and_the_engine_agree_on_every_body(
    dflash_engine: Engine, ddtree_engine: Engine, tmp_path: Path
) -> None:
    """sglang's own code, run now on CPU (not the recorded file), against the engine: 0 differences."""
    if not Path(SGLANG_PYTHON).exists():
        if os.environ.get("REPRO_REQUIRE_SGLANG_CPU") == "1":
            pytest.fail(f"REPRO_REQUIRE_SGLANG_CPU=1 and no sglang 0.5.23 Python at {SGLANG_PYTHON}", pytrace=False)
        pytest.skip(f"no sglang 0.5.23 Python at {SGLANG_PYTHON}")
    sys.path.insert(0, str(REPO / "patches" / "tools"))
    import series  # type: ignore[import-not-found]  # noqa: PLC0415 - stdlib-only helper of the patch series

    tree = Path(series.patched_tree(tmp_path / "tree"))
    cases = [dict(c) for c in REQUEST_CASES]
    verdicts = refgen_protocol.oracle_verdicts(tree, cases, python=SGLANG_PYTHON)
    differences = []
    for index, (case, verdict) in enumerate(zip(cases, verdicts, strict=True)):
        found = difference(verdict, answer(_engine(case, dflash_engine, ddtree_engine), case))
        if found is not None:
            differences.append(f"{_id(index, case)}: {found}")
    print(f"request parity: {len(cases)} bodies, {len(differences)} differences")
    assert differences == [], "\n".join(differences)
