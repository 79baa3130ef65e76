"""Which attention backends sglang 0.5.23 runs on which NVIDIA GPUs, from its own code (stdlib only).

The server refuses a backend its GPUs cannot run only after loading the
weights (6-11 minutes for Kimi K2.6 on 8 GPUs) or while resolving its
arguments at start: the restart chain checks the configured
``--attention-backend`` against the target GPUs' compute capability
(``nvidia-smi --query-gpu=index,compute_cap``) before the running server is
stopped, and names the backends the host can run.

Each entry cites the code of the sglang 0.5.23 wheel that decides it (paths
under ``sglang/srt/``). A backend without an entry has no compute-capability
gate in that code (triton, torch_native, flex_attention, flashinfer, fa4,
flashmla, ...). ``tests/deploy/test_attention_backends.py`` reads the cited
lines from the wheel.
"""

from __future__ import annotations

#: backend -> (compute capability majors the code accepts, where sglang 0.5.23 decides it)
GATED = {
    "fa3": (
        (9,),
        "layers/attention/attention_registry.py:241-245: FlashAttention v3 needs SM90 "
        "(SM80 for non-MLA models only; Kimi K2.x is an MLA model)",
    ),
    "hpc_ops": ((9,), "layers/attention/hpc_ops_backend.py:138-142: the HPC-Ops kernels ship sm90a only"),
    "trtllm_mha": (
        (9, 10, 12),
        "arg_groups/attention_hook.py:199-227: SM90, SM100 or SM120 "
        "(is_sm90/is_sm100/is_sm120, utils/common.py:304-313, 333-337)",
    ),
    "trtllm_mla": (
        (10, 11, 12),
        "arg_groups/overrides.py:1210-1213: Blackwell only (is_blackwell: majors 10, 11, 12, utils/common.py:297-303)",
    ),
    "cutedsl_mla": ((10,), "arg_groups/overrides.py:1244-1247: SM100 only (is_sm100, utils/common.py:309-313)"),
    "tokenspeed_mla": (
        (10,),
        "an alias of cutedsl_mla (arg_groups/serving_hook.py:304); arg_groups/overrides.py:1244-1247: SM100 only",
    ),
}

#: backends for other hardware than NVIDIA GPUs (arg_groups/choices.py:92-98)
NOT_NVIDIA = {
    "aiter": "AMD GPUs (ROCm)",
    "wave": "AMD GPUs (ROCm)",
    "intel_amx": "Intel CPUs (AMX)",
    "ascend": "Ascend NPUs",
    "intel_xpu": "Intel XPUs",
}


def major_of(compute_cap):
    """12 from '12.0'; None when nvidia-smi does not say ('[N/A]')."""
    head = str(compute_cap).strip().split(".", maxsplit=1)[0]
    return int(head) if head.isdigit() else None


def runnable(choices, majors):
    """The backends of ``choices`` the code accepts on GPUs of every one of ``majors``."""
    out = []
    for name in choices:
        if name in NOT_NVIDIA:
            continue
        accepted = GATED.get(name)
        if accepted is None or all(m in accepted[0] for m in majors):
            out.append(name)
    return out


def backend_problem(backend, gpus, choices):
    """Why ``backend`` cannot run on ``gpus`` (each ``{"index", "name", "compute_cap"}``), or None (pure)."""
    if backend in NOT_NVIDIA:
        return (
            f"attention backend {backend} is for {NOT_NVIDIA[backend]}, not NVIDIA GPUs (sglang 0.5.23 "
            f"arg_groups/choices.py:92-98); this host can run: {', '.join(runnable(choices, _majors(gpus)))}"
        )
    gate = GATED.get(backend)
    if gate is None:
        return None
    accepted, where = gate
    wrong = [g for g in gpus if major_of(g["compute_cap"]) is not None and major_of(g["compute_cap"]) not in accepted]
    if not wrong:
        return None
    shown = "; ".join(f"GPU {g['index']} ({g['name']}) compute capability {g['compute_cap']}" for g in wrong)
    runs_on = ", ".join(f"SM{m}x" for m in accepted)
    return (
        f"attention backend {backend} cannot run here: {shown}; sglang 0.5.23 runs {backend} on {runs_on} only "
        f"({where}). This host can run: {', '.join(runnable(choices, _majors(gpus)))} "
        "(sglang_service_attention_backend)"
    )


def _majors(gpus):
    return sorted({m for m in (major_of(g["compute_cap"]) for g in gpus) if m is not None})
