"""Command line of the simulated engine: sglang 0.5.23's flags (same names, types,
defaults and refusals) plus the DDTree patch series' flags and ``--sim-*`` flags.

A refused command line exits 2 with a message naming the flag and value,
before anything is loaded, as a real server refuses to start.
"""

from __future__ import annotations

import argparse
import re
import sys
from decimal import Decimal, InvalidOperation
from typing import Any

from repro_py import spec_config
from repro_py.exitcodes import ExitCode
from repro_py.simengine.ddtree_refusals import startup_refusal
from repro_py.simengine.faults import ALLOWED, FaultError, parse_faults
from repro_py.simengine.model_dirs import CliError, drafter_block_size_of, read_config
from repro_py.simengine.perf_model import HOST_SCALE
from repro_py.simengine.settings import Settings, redact_key_args, redact_keys
from repro_py.simengine.sglang_choices import (
    ATTENTION_BACKENDS,
    CUDA_GRAPH_BACKENDS,
    DETERMINISTIC_ATTENTION_BACKENDS,
    KNOWN_ALGORITHMS,
    REASONING_PARSERS,
    TOOL_CALL_PARSERS,
    deterministic_backend_refusal,
)

DEFAULT_KV_TOKENS = 400_000  # 64 x (8192 + 512) = 557k does not fit; 64 x (4096 + 512) does
DFLASH_DEFAULT_MAX_RUNNING = 48  # sglang 0.5.23 resets max_running_requests to 48 for DFLASH

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
    s.add_argument("--sim-seed", type=int, default=0, help="Seed of the per-step acceptance draws.")
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
    return p


# short key -> (flag, argparse dest): from the config contract (the dest is the echo key)
_KEY_TO_FLAG = {f.key: (f.flag, f.echo) for f in spec_config.FIELDS}


def _name_flag(problem: str, ns: argparse.Namespace, block_flag: tuple[str, str] | None = None) -> str:
    for key, names in _KEY_TO_FLAG.items():
        if problem.startswith((f"{key}=", f"{key} ")):
            flag, dest = block_flag if key == "block_size" and block_flag is not None else names
            value = getattr(ns, dest)
            shown = "(not set)" if value is None else str(value)
            return f"{flag} {shown}: {problem}"
    return problem


def resolve(argv: list[str]) -> Settings:
    """Parse and validate; raise CliError (or SystemExit from argparse) on a refused command line."""
    parser = build_parser()
    ns = parser.parse_args(argv)
    warnings: list[str] = []

    model_cfg = read_config(ns.model_path, "--model-path")
    cfg_ctx = model_cfg.get("max_position_embeddings")
    config_context = cfg_ctx if isinstance(cfg_ctx, int) and cfg_ctx > 0 else 131072
    context_length = config_context
    if ns.context_length is not None:
        if ns.context_length < 1:
            raise CliError(f"--context-length {ns.context_length}: must be positive")
        if ns.context_length > config_context:
            raise CliError(
                f"--context-length {ns.context_length}: longer than the model's "
                f"max_position_embeddings={config_context} in config.json"
            )
        context_length = ns.context_length
    for flag, dest in (("--tp-size", "tp_size"), ("--ep-size", "ep_size"), ("--dp-size", "dp_size")):
        if getattr(ns, dest) < 1:
            raise CliError(f"{flag} {getattr(ns, dest)}: must be >= 1")
    if ns.mem_fraction_static is not None and not 0.0 < ns.mem_fraction_static < 1.0:
        raise CliError(f"--mem-fraction-static {ns.mem_fraction_static}: must be between 0 and 1")
    if not 0 < ns.port < 65536:
        raise CliError(f"--port {ns.port}: must be 1..65535")
    if ns.sim_speed <= 0:
        raise CliError(f"--sim-speed {ns.sim_speed}: must be > 0")
    for flag in ("sim_load_seconds", "sim_warmup_seconds", "sim_linger_seconds", "sim_health_seconds"):
        if getattr(ns, flag) < 0:
            raise CliError(f"--{flag.replace('_', '-')} {getattr(ns, flag)}: must be >= 0")
    if ns.sim_kv_tokens < 1:
        raise CliError(f"--sim-kv-tokens {ns.sim_kv_tokens}: must be >= 1")
    if ns.enable_deterministic_inference and ns.attention_backend not in (None, *DETERMINISTIC_ATTENTION_BACKENDS):
        raise CliError(deterministic_backend_refusal(ns.attention_backend))
    try:
        faults = parse_faults(ns.sim_fault)
    except FaultError as exc:
        raise CliError(str(exc)) from exc

    # --- speculative settings: the bundle's one set of rules (repro_py.spec_config) ---
    algo_raw = ns.speculative_algorithm
    algo = algo_raw.upper() if isinstance(algo_raw, str) else None
    drafter_block: int | None = None
    block_flag: tuple[str, str] | None = None  # where the block size came from, when not its own flag
    if algo is None:
        short: dict[str, object] = {"algorithm": "none"}
        for key, (_flag, dest) in _KEY_TO_FLAG.items():
            if key != "algorithm" and getattr(ns, dest) is not None:
                short[key] = getattr(ns, dest)
        if ns.speculative_draft_model_path is not None:
            warnings.append("--speculative-draft-model-path is set but no --speculative-algorithm; ignored")
    else:
        if algo not in KNOWN_ALGORITHMS:
            raise CliError(
                f"--speculative-algorithm {algo_raw}: unknown algorithm; sglang 0.5.23 knows "
                f"{', '.join(a for a in KNOWN_ALGORITHMS if a != 'DDTREE')} (DDTREE with the patch series)"
            )
        if algo not in ("DFLASH", "DDTREE"):
            raise CliError(
                f"--speculative-algorithm {algo_raw}: the simulated engine serves only the DFLASH "
                "family (DFLASH, DDTREE)"
            )
        if ns.speculative_draft_model_path is None:
            raise CliError(
                "--speculative-draft-model-path (not set): DFLASH speculative decoding requires "
                "setting --speculative-draft-model-path."
            )
        drafter_cfg = read_config(ns.speculative_draft_model_path, "--speculative-draft-model-path")
        drafter_block = drafter_block_size_of(drafter_cfg, ns.speculative_draft_model_path)
        block = ns.speculative_dflash_block_size
        if block is not None and block <= 0:
            raise CliError(
                f"--speculative-dflash-block-size {block}: DFLASH requires "
                f"--speculative-dflash-block-size to be positive, got {block}."
            )
        num_draft = ns.speculative_num_draft_tokens
        if block is not None and num_draft is not None and block != num_draft:
            raise CliError(
                f"--speculative-num-draft-tokens {ns.speculative_num_draft_tokens}: both "
                "--speculative-num-draft-tokens and --speculative-dflash-block-size are set but they differ. "
                f"For DFLASH they must match. speculative_dflash_block_size={block}."
            )
        if block is None and num_draft is not None:
            block = num_draft
            block_flag = ("--speculative-num-draft-tokens", "speculative_num_draft_tokens")
        if block is None:
            block = drafter_block if drafter_block is not None else 16
            ns.speculative_dflash_block_size = block
        if drafter_block is not None and block != drafter_block:
            warnings.append(
                f"DFLASH block size mismatch: using speculative_num_draft_tokens={block} but draft "
                f"config block_size={drafter_block}."
            )
        tree = algo == "DDTREE" or ns.speculative_ddtree_budget is not None
        short = {"algorithm": "ddtree" if tree else "dflash", "block_size": block}
        for key in ("budget", "topk", "window"):
            value = getattr(ns, _KEY_TO_FLAG[key][1])
            if value is not None:
                short[key] = value
        for dest in ("speculative_num_steps", "speculative_eagle_topk"):
            value = getattr(ns, dest)
            if value is not None and value != 1:
                warnings.append(f"DFLASH only supports {dest} == 1; overriding {dest}={value} to 1.")
    try:
        spec = spec_config.validate(short, drafter_block_size=drafter_block, allow_block_mismatch=True)
    except spec_config.SpecConfigError as exc:
        raise CliError("; ".join(_name_flag(p, ns, block_flag) for p in exc.problems)) from exc
    if spec.window is not None and spec.block_size is not None and spec.window < spec.block_size:
        raise CliError(
            f"--speculative-draft-window-size {spec.window}: must be >= --speculative-num-draft-tokens "
            f"(block_size). window_size={spec.window}, block_size={spec.block_size}."
        )
    why = startup_refusal(ns.speculative_accept_threshold_single, ns.speculative_accept_threshold_acc)
    if spec.algorithm == "ddtree" and why is not None:
        raise CliError(why)
    if ns.speculative_draft_window_size is not None and spec.algorithm == "none":
        raise CliError(
            f"--speculative-draft-window-size {ns.speculative_draft_window_size}: set without --speculative-algorithm"
        )

    max_running = ns.max_running_requests
    if max_running is None:
        max_running = DFLASH_DEFAULT_MAX_RUNNING if spec.algorithm != "none" else 1024
        if spec.algorithm != "none":
            warnings.append(
                "Max running requests is reset to 48 for speculative decoding. You can override "
                "this by explicitly setting --max-running-requests."
            )
    elif max_running < 1:
        raise CliError(f"--max-running-requests {max_running}: must be >= 1")

    served = ns.served_model_name or ns.model_path
    args = redact_key_args(vars(ns))  # the API keys read "<redacted>", as with patch 0012
    args.pop("sim_fault")
    args.update(
        served_model_name=served,
        context_length=context_length,
        max_running_requests=max_running,
        speculative_algorithm=None if spec.algorithm == "none" else "DFLASH",
        speculative_dflash_block_size=spec.block_size,
        speculative_num_draft_tokens=spec.block_size,
        speculative_num_steps=None if spec.algorithm == "none" else 1,
        speculative_eagle_topk=None if spec.algorithm == "none" else 1,
        speculative_ddtree_budget=spec.budget,
        speculative_ddtree_topk_cap=spec.topk,
        speculative_draft_window_size=spec.window,
        speculative_draft_model_revision="main" if spec.algorithm != "none" else None,
        device="cuda",
    )
    return Settings(
        args=args,
        model_path=ns.model_path,
        served_model_name=served,
        host=ns.host,
        port=ns.port,
        api_key=ns.api_key,
        admin_api_key=ns.admin_api_key,
        enable_metrics=ns.enable_metrics,
        reasoning_parser=ns.reasoning_parser,
        context_length=context_length,
        spec=spec,
        drafter_block_size=drafter_block,
        max_running_requests=max_running,
        kv_tokens=ns.sim_kv_tokens,
        speed=ns.sim_speed,
        seed=ns.sim_seed,
        load_seconds=ns.sim_load_seconds,
        warmup_seconds=ns.sim_warmup_seconds,
        linger_seconds=ns.sim_linger_seconds,
        health_seconds=ns.sim_health_seconds,
        skip_warmup=ns.skip_server_warmup,
        host_profile=ns.sim_host,
        faults=faults,
        decode_log_interval=max(1, ns.decode_log_interval),
        include_usage_default=ns.stream_response_default_include_usage,
        warnings=tuple(warnings),
        launch_command=" ".join(["python", "-m", "repro_py.simengine", *redact_keys(argv)]),
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m repro_py.simengine``; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        settings = resolve(argv)
    except SystemExit as exc:  # argparse already printed usage and the error
        code = exc.code
        return int(code) if isinstance(code, int) else int(ExitCode.USAGE)
    except CliError as exc:
        print(f"[SIMULATED] error: {exc}", file=sys.stderr)
        print(f"ValueError: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    from repro_py.simengine.lifecycle import run  # noqa: PLC0415 - aiohttp is imported only to serve

    return run(settings)
