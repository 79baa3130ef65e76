"""The simulated engine's command line: sglang 0.5.23's flags (same names, types, defaults and choices), the DDTree
patch series' flags and the ``--sim-*`` flags. :mod:`repro_py.simengine.launch_settings` resolves what they give."""

from __future__ import annotations

import argparse
import re
import sys
from decimal import Decimal, InvalidOperation
from typing import Any

from repro_py.simengine.faults import ALLOWED
from repro_py.simengine.perf_model import HOST_SCALE
from repro_py.simengine.sglang_choices import (
    ATTENTION_BACKENDS,
    CUDA_GRAPH_BACKENDS,
    REASONING_PARSERS,
    TOOL_CALL_PARSERS,
)

DEFAULT_KV_TOKENS = 400_000  # 64 x (8192 + 512) = 557k does not fit; 64 x (4096 + 512) does

FAULT_HELP = ALLOWED.replace(", ", " | ")


def human_readable_int(value: str) -> int:
    """sglang's ``--context-length`` parser: 1k, 25.6k, 1Ki, 1M ... or a plain integer."""
    value = value.strip()
    si = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
    iec = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(Ki|Mi|Gi|Ti|k|M|G|T)", value)
    if match:
        number, suffix = match.groups()
        if suffix in iec:
            if "." in number:
                raise argparse.ArgumentTypeError(f"Decimals are not allowed with IEC suffixes like '{suffix}'.")
            return int(number) * iec[suffix]
        try:
            return int(Decimal(number) * si[suffix])
        except InvalidOperation as exc:  # pragma: no cover - regex guarantees a number
            raise argparse.ArgumentTypeError(str(exc)) from exc
    try:
        return int(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"invalid integer value: {value!r}") from exc


class _DeprecatedStoreTrue(argparse.Action):
    """``--disable-cuda-graph``: deprecated in 0.5.23, still stores True with a warning."""

    def __init__(self, option_strings: list[str], dest: str, new_flag: str = "", **kwargs: Any) -> None:
        self.new_flag = new_flag
        super().__init__(option_strings, dest, nargs=0, const=True, default=False, **kwargs)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        print(
            f"WARNING: '{option_string}' is deprecated and will be removed in a future release. "
            f"Use '{self.new_flag}' instead.",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m repro_py.simengine",
        description="SIMULATED SGLang 0.5.23 server (DFlash + DDTree). Same flags as "
        "python -m sglang.launch_server; --sim-* flags control the simulation. Its figures are a model "
        "of published numbers, not measurements.",
    )
    _add_serving_flags(p)
    _add_parallel_flags(p)
    _add_speculative_flags(p)
    _add_simulation_flags(p)
    return p


def _add_serving_flags(p: argparse.ArgumentParser) -> None:
    # --- model / serving (fields/model.py, fields/serving.py) ---
    p.add_argument(
        "--model-path",
        "--model",
        dest="model_path",
        required=True,
        help="The path of the model weights (a directory with config.json).",
    )
    p.add_argument("--served-model-name", default=None, help="Model name returned by /v1/models.")
    p.add_argument("--host", default="127.0.0.1", help="The host of the HTTP server.")
    p.add_argument("--port", type=int, default=30000, help="The port of the HTTP server.")
    p.add_argument("--trust-remote-code", action="store_true", help="Allow custom models (accepted, no effect).")
    p.add_argument(
        "--context-length",
        type=human_readable_int,
        default=None,
        help="The model's maximum context length (default: the model's config.json).",
    )
    p.add_argument("--api-key", default=None, help="API key required as 'Authorization: Bearer KEY'.")
    p.add_argument("--admin-api-key", default=None, help="Admin key for admin routes (default: --api-key).")
    p.add_argument("--enable-metrics", action="store_true", help="Expose Prometheus metrics at /metrics.")
    p.add_argument(
        "--reasoning-parser",
        choices=REASONING_PARSERS,
        default=None,
        help="Split reasoning into reasoning_content (the model uses <think>...</think>).",
    )
    p.add_argument(
        "--tool-call-parser",
        choices=TOOL_CALL_PARSERS,
        default=None,
        help="Parser of tool calls (accepted and echoed; the simulated engine emits no tool calls).",
    )
    p.add_argument("--skip-server-warmup", action="store_true", help="Skip the warmup request.")
    p.add_argument("--stream-response-default-include-usage", action="store_true")
    p.add_argument("--enable-cache-report", action="store_true")
    p.add_argument("--log-level", default="info", choices=("debug", "info", "warning", "error", "critical"))
    p.add_argument("--decode-log-interval", type=int, default=40, help="Decode log line every N steps.")


def _add_parallel_flags(p: argparse.ArgumentParser) -> None:
    # --- parallelism / memory / execution (fields/parallel.py, schedule.py, exec_.py) ---
    p.add_argument("--tp-size", "--tensor-parallel-size", dest="tp_size", type=int, default=1)
    p.add_argument("--ep-size", "--expert-parallel-size", "--ep", dest="ep_size", type=int, default=1)
    p.add_argument("--dp-size", "--data-parallel-size", dest="dp_size", type=int, default=1)
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--attention-backend", choices=ATTENTION_BACKENDS, default=None)
    p.add_argument("--enable-deterministic-inference", action="store_true", help="Echoed (the engine is deterministic)")
    # 0.5.23 has only the -decode/-prefill spellings; a bare --cuda-graph-max-bs is an
    # ambiguous abbreviation there and argparse refuses it, so it is refused here too.
    p.add_argument("--cuda-graph-max-bs-decode", type=int, default=None)
    p.add_argument("--cuda-graph-max-bs-prefill", type=int, default=None)
    p.add_argument("--cuda-graph-backend-decode", choices=CUDA_GRAPH_BACKENDS, default=None)
    p.add_argument("--cuda-graph-backend-prefill", choices=CUDA_GRAPH_BACKENDS, default=None)
    p.add_argument(
        "--disable-cuda-graph",
        action=_DeprecatedStoreTrue,
        new_flag="--cuda-graph-backend-{decode,prefill}=disabled",
        help="Deprecated in 0.5.23 (still honoured).",
    )


def _add_speculative_flags(p: argparse.ArgumentParser) -> None:
    # --- speculative decoding (fields/spec.py + the DDTree patch series) ---
    p.add_argument(
        "--speculative-algorithm",
        default=None,
        help="DFLASH, or DDTREE (the patch series' alias for DFLASH in tree mode).",
    )
    p.add_argument(
        "--speculative-draft-model-path", "--speculative-draft-model", dest="speculative_draft_model_path", default=None
    )
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--speculative-dflash-block-size", type=int, default=None)
    p.add_argument("--speculative-draft-window-size", type=int, default=None)
    p.add_argument(
        "--speculative-ddtree-budget",
        type=int,
        default=None,
        help="DDTree node budget (patch series); selects tree mode.",
    )
    p.add_argument(
        "--speculative-ddtree-topk-cap",
        type=int,
        default=None,
        help="DDTree per-depth top-K cap (patch series); 1..budget.",
    )
    p.add_argument("--speculative-accept-threshold-single", type=float, default=1.0, help="DDTree: 1.0 only.")
    p.add_argument("--speculative-accept-threshold-acc", type=float, default=1.0, help="DDTree: 1.0 only.")


def _add_simulation_flags(p: argparse.ArgumentParser) -> None:
    # --- simulation only ---
    s = p.add_argument_group("simulation (not sglang flags)")
    s.add_argument(
        "--sim-load-seconds",
        type=float,
        default=3.0,
        help="Wall seconds of 'model load' during which nothing listens on the port.",
    )
    s.add_argument(
        "--sim-warmup-seconds",
        type=float,
        default=1.0,
        help="Wall seconds after the port opens during which /health is 503 but /v1/models answers.",
    )
    s.add_argument(
        "--sim-linger-seconds",
        type=float,
        default=0.0,
        help="After SIGTERM and the drain: seconds the old process keeps answering /v1/models "
        "(with /health 503) before it exits.",
    )
    s.add_argument(
        "--sim-health-seconds",
        type=float,
        default=0.0,
        help="Seconds /health and /health_generate take when ready (sglang 0.5.23 sleeps 1 s and runs a "
        "1-token generation, so about 1; 0 answers at once).",
    )
    s.add_argument(
        "--sim-speed",
        type=float,
        default=1.0,
        help="Time compression of the performance model: decode steps take model time / SPEED.",
    )
    s.add_argument(
        "--sim-seed",
        type=int,
        default=0,
        help="Seed of the per-step acceptance draws and of sampled requests that carry no seed.",
    )
    s.add_argument(
        "--sim-kv-tokens",
        type=int,
        default=DEFAULT_KV_TOKENS,
        help="KV cache capacity in tokens (server info max_total_num_tokens).",
    )
    s.add_argument(
        "--sim-host", choices=tuple(HOST_SCALE), default="ct200", help="Host profile of the performance model."
    )
    s.add_argument("--sim-fault", action="append", default=[], metavar="FAULT", help=FAULT_HELP)
