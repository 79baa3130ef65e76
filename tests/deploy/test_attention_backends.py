"""An attention backend the GPUs cannot run is refused before the running server stops, with the backends they can.

The table (plugins/module_utils/sglang_backends.py) is sglang 0.5.23's own gates; each entry's cited
lines are read from the pinned wheel here, so a table that no longer says what the code says fails.
"""

from __future__ import annotations

import re
import sys
import zipfile

from conftest import ROOT, load_module

from repro_py.simengine import sglang_choices

sys.path.insert(0, str(ROOT / "patches" / "tools"))

backends = load_module("sglang_backends", ROOT / "plugins/module_utils/sglang_backends.py")
CHOICES = list(sglang_choices.ATTENTION_BACKENDS)
RTX = [{"index": i, "name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0"} for i in range(8)]
B300 = [{"index": i, "name": "NVIDIA B300 SXM6 AC", "compute_cap": "10.3"} for i in range(8)]
H200 = [{"index": 0, "name": "NVIDIA H200", "compute_cap": "9.0"}]


def test_fa3_on_rtx_pro_6000_is_refused_naming_what_the_host_can_run() -> None:
    why = backends.backend_problem("fa3", RTX, CHOICES)
    assert why is not None
    assert why.startswith("attention backend fa3 cannot run here: GPU 0 (NVIDIA RTX PRO 6000 Blackwell Server Edition) "
                          "compute capability 12.0; GPU 1")  # fmt: skip
    assert "runs fa3 on SM9x only (layers/attention/attention_registry.py:241-245" in why
    can = why.split("This host can run: ")[1].split(" (sglang_service_attention_backend)")[0].split(", ")
    assert "triton" in can and "trtllm_mla" in can and "trtllm_mha" in can
    assert not {"fa3", "hpc_ops", "cutedsl_mla", "tokenspeed_mla", "aiter", "wave", "intel_amx"} & set(can)


def test_each_gate_on_each_field_gpu() -> None:
    def ok(backend: str, gpus: list[dict[str, object]]) -> bool:
        return backends.backend_problem(backend, gpus, CHOICES) is None

    assert ok("triton", RTX) and ok("triton", B300) and ok("flashinfer", RTX)
    assert ok("fa3", H200) and not ok("fa3", B300) and not ok("fa3", RTX)
    assert ok("cutedsl_mla", B300) and not ok("cutedsl_mla", RTX) and not ok("tokenspeed_mla", RTX)
    assert ok("trtllm_mla", B300) and ok("trtllm_mla", RTX) and not ok("trtllm_mla", H200)
    assert ok("trtllm_mha", H200) and ok("trtllm_mha", RTX)
    assert not ok("hpc_ops", B300) and ok("hpc_ops", H200)
    assert not ok("aiter", B300) and "AMD GPUs" in str(backends.backend_problem("aiter", B300, CHOICES))
    # a GPU whose compute capability nvidia-smi does not report is not refused on a guess
    assert ok("fa3", [{"index": 0, "name": "x", "compute_cap": "[N/A]"}])


def test_every_gated_backend_is_one_of_sglang_0_5_23s_choices() -> None:
    assert set(backends.GATED) | set(backends.NOT_NVIDIA) <= set(CHOICES)


def _lines(zf: zipfile.ZipFile, member: str, first: int, last: int) -> str:
    return "\n".join(zf.read("sglang/srt/" + member).decode().splitlines()[first - 1 : last])


# What each cited range must say in the wheel (the code that decides, not a comment about it).
CITED = {
    "fa3": "assert (major == 8 and not runner.use_mla_backend) or major == 9",
    "hpc_ops": "if major != 9:",
    "trtllm_mha": "get_platform().is_sm90 or get_platform().is_sm100 or get_platform().is_sm120",
    "trtllm_mla": "if not get_platform().is_blackwell:",
    "cutedsl_mla": "if not get_platform().is_sm100:",
    "tokenspeed_mla": "if not get_platform().is_sm100:",
}


def test_the_cited_lines_say_what_the_table_says(wheel: zipfile.ZipFile) -> None:
    for name, (_majors, where) in backends.GATED.items():
        member, first, last = re.findall(r"([a-z_/]+\.py):(\d+)-(\d+)", where)[-1 if name == "tokenspeed_mla" else 0]
        text = _lines(wheel, member, int(first), int(last))
        assert CITED[name] in " ".join(text.split()), (name, where, text)
    common = wheel.read("sglang/srt/utils/common.py").decode()
    for helper, majors in (("is_blackwell_supported = is_blackwell", "[10, 11, 12]"), ("is_sm100_supported", "[10]"),
                           ("is_sm120_supported", "[12]"), ("is_sm90_supported", "[9]")):  # fmt: skip
        block = common[common.index(helper + " = ") if helper.endswith("supported") else common.index(helper) :][:300]
        assert f"device_capability_majors={majors}" in block, (helper, block)
    aliases = wheel.read("sglang/srt/arg_groups/serving_hook.py").decode()
    assert '"tokenspeed_mla": "cutedsl_mla"' in aliases
    choices = _lines(wheel, "arg_groups/choices.py", 92, 98)
    assert "# AMD specific" in choices and "# Other platforms" in choices
    assert all(f'"{n}"' in choices for n in backends.NOT_NVIDIA)
