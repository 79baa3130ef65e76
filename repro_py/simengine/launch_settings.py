"""The simulated engine's command line resolved into :class:`Settings`, or refused as sglang 0.5.23 refuses it.

A refused command line raises :class:`CliError` naming the flag and value (argparse's own refusals exit 2), before
anything is loaded, as a real server refuses to start. The speculative settings go through the bundle's one set
of rules (:func:`repro_py.spec_config.validate`), with sglang's DFLASH defaults and warnings around them.
"""

from __future__ import annotations

import argparse
from typing import Any

from repro_py import spec_config
from repro_py.simengine.ddtree_refusals import startup_refusal
from repro_py.simengine.faults import FaultError, parse_faults
from repro_py.simengine.flags import build_parser
from repro_py.simengine.model_dirs import CliError, drafter_block_size_of, read_config
from repro_py.simengine.settings import Settings, redact_key_args, redact_keys
from repro_py.simengine.sglang_choices import (
    DETERMINISTIC_ATTENTION_BACKENDS,
    KNOWN_ALGORITHMS,
    deterministic_backend_refusal,
)

DFLASH_DEFAULT_MAX_RUNNING = 48  # sglang 0.5.23 resets max_running_requests to 48 for DFLASH

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


def _context_length(ns: argparse.Namespace) -> int:
    """``--context-length``, at most the model's ``max_position_embeddings`` (its default)."""
    model_cfg = read_config(ns.model_path, "--model-path")
    cfg_ctx = model_cfg.get("max_position_embeddings")
    config_context = cfg_ctx if isinstance(cfg_ctx, int) and cfg_ctx > 0 else 131072
    if ns.context_length is None:
        return config_context
    if ns.context_length < 1:
        raise CliError(f"--context-length {ns.context_length}: must be positive")
    if ns.context_length > config_context:
        raise CliError(
            f"--context-length {ns.context_length}: longer than the model's "
            f"max_position_embeddings={config_context} in config.json"
        )
    return int(ns.context_length)


def _check_ranges(ns: argparse.Namespace) -> None:
    """The sizes, the port, the simulation's times and the deterministic-inference backend."""
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


def _baseline_keys(ns: argparse.Namespace, warnings: list[str]) -> dict[str, object]:
    """No ``--speculative-algorithm``: the baseline, with whatever speculative flags were given (to refuse them)."""
    short: dict[str, object] = {"algorithm": "none"}
    for key, (_flag, dest) in _KEY_TO_FLAG.items():
        if key != "algorithm" and getattr(ns, dest) is not None:
            short[key] = getattr(ns, dest)
    if ns.speculative_draft_model_path is not None:
        warnings.append("--speculative-draft-model-path is set but no --speculative-algorithm; ignored")
    return short


def _dflash_block(
    ns: argparse.Namespace, drafter_block: int | None, warnings: list[str]
) -> tuple[int, tuple[str, str] | None]:
    """The DFLASH block size as sglang settles it (its flag, else ``--speculative-num-draft-tokens``, else the
    drafter's), and the flag it came from when not its own."""
    block = ns.speculative_dflash_block_size
    block_flag: tuple[str, str] | None = None
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
    return int(block), block_flag


def _dflash_keys(
    ns: argparse.Namespace, algo_raw: str, warnings: list[str]
) -> tuple[dict[str, object], int | None, tuple[str, str] | None]:
    """DFLASH or DDTREE: (the short keys, the drafter's block size, the flag the block size came from)."""
    algo = algo_raw.upper()
    if algo not in KNOWN_ALGORITHMS:
        raise CliError(
            f"--speculative-algorithm {algo_raw}: unknown algorithm; sglang 0.5.23 knows "
            f"{', '.join(a for a in KNOWN_ALGORITHMS if a != 'DDTREE')} (DDTREE with the patch series)"
        )
    if algo not in ("DFLASH", "DDTREE"):
        raise CliError(
            f"--speculative-algorithm {algo_raw}: the simulated engine serves only the DFLASH family (DFLASH, DDTREE)"
        )
    if ns.speculative_draft_model_path is None:
        raise CliError(
            "--speculative-draft-model-path (not set): DFLASH speculative decoding requires "
            "setting --speculative-draft-model-path."
        )
    drafter_cfg = read_config(ns.speculative_draft_model_path, "--speculative-draft-model-path")
    drafter_block = drafter_block_size_of(drafter_cfg, ns.speculative_draft_model_path)
    block, block_flag = _dflash_block(ns, drafter_block, warnings)
    tree = algo == "DDTREE" or ns.speculative_ddtree_budget is not None
    short: dict[str, object] = {"algorithm": "ddtree" if tree else "dflash"}
    for field in spec_config.SETTINGS:  # every setting given (validate refuses the ones the algorithm drops)
        value = block if field.key == "block_size" else getattr(ns, field.echo)
        if value is not None:
            short[field.key] = value
    for dest in ("speculative_num_steps", "speculative_eagle_topk"):
        value = getattr(ns, dest)
        if value is not None and value != 1:
            warnings.append(f"DFLASH only supports {dest} == 1; overriding {dest}={value} to 1.")
    return short, drafter_block, block_flag


def _speculative(ns: argparse.Namespace, warnings: list[str]) -> tuple[spec_config.SpecConfig, int | None]:
    """The speculative config (validated by :func:`repro_py.spec_config.validate`) and the drafter's block size."""
    algo_raw = ns.speculative_algorithm
    if isinstance(algo_raw, str):
        short, drafter_block, block_flag = _dflash_keys(ns, algo_raw, warnings)
    else:
        short, drafter_block, block_flag = _baseline_keys(ns, warnings), None, None
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
    return spec, drafter_block


def _max_running(ns: argparse.Namespace, spec: spec_config.SpecConfig, warnings: list[str]) -> int:
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
    return int(max_running)


def _echoed_args(
    ns: argparse.Namespace, spec: spec_config.SpecConfig, served: str, context_length: int, max_running: int
) -> dict[str, Any]:
    """The server arguments ``/server_info`` echoes: the resolved values, the API keys redacted."""
    args = redact_key_args(vars(ns))  # the API keys read "<redacted>", as with patch 0012
    args.pop("sim_fault")
    args.update(
        served_model_name=served,
        context_length=context_length,
        max_running_requests=max_running,
        speculative_num_draft_tokens=spec.block_size,
        speculative_num_steps=None if spec.algorithm == "none" else 1,
        speculative_eagle_topk=None if spec.algorithm == "none" else 1,
        speculative_draft_model_revision="main" if spec.algorithm != "none" else None,
        device="cuda",
    )
    # the contract's settings as resolved (None where the algorithm drops one), the algorithm as the engine names it
    args.update({f.echo: getattr(spec, f.key) for f in spec_config.SETTINGS})
    args[spec_config.FIELD_BY_KEY["algorithm"].echo] = spec_config.ENGINE_ALGORITHM[spec.algorithm]
    return args


def resolve(argv: list[str]) -> Settings:
    """Parse and validate; raise CliError (or SystemExit from argparse) on a refused command line."""
    ns = build_parser().parse_args(argv)
    warnings: list[str] = []
    context_length = _context_length(ns)
    _check_ranges(ns)
    try:
        faults = parse_faults(ns.sim_fault)
    except FaultError as exc:
        raise CliError(str(exc)) from exc
    spec, drafter_block = _speculative(ns, warnings)
    max_running = _max_running(ns, spec, warnings)
    served = ns.served_model_name or ns.model_path
    return Settings(
        args=_echoed_args(ns, spec, served, context_length, max_running),
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
