"""Command line of the gates: ``python -m repro_py.gates --url URL --expect algorithm=ddtree,budget=8,...``.

``-i INVENTORY`` instead of ``--url`` takes the URL, the model name and the API key
from the inventory, resolved as its plays resolve it (vault options as
ansible-playbook's); otherwise the key comes from ``$SGLANG_API_KEY``.

Runs the config echo, losslessness (greedy, token for token), sampled losslessness (in distribution)
and coding gates against a running server.
Exit codes: 0 every gate passed; 1 a gate failed; 2 bad arguments; 4 no
isolating sandbox for the coding gate (bubblewrap or namespaces) and no
``--allow-unisolated``: nothing was judged; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any

from repro_py.atomicio import write_json_atomic
from repro_py.cliparse import parse_or_exit_code
from repro_py.codeeval.sandbox import IsolationUnavailable, require_isolation
from repro_py.exitcodes import ExitCode
from repro_py.gates import GATE_NAMES, run_gates, sampled, serverlog
from repro_py.gates.coding import DEFAULT_MAX_TOKENS, DEFAULT_MIN_PASS_RATE
from repro_py.gates.lossless import DEFAULT_MAX_NEW_TOKENS, make_reference
from repro_py.inventory_endpoint import add_arguments as add_endpoint_arguments
from repro_py.inventory_endpoint import endpoint_from_args
from repro_py.spec_config import SpecConfigError, validate


def parse_expect(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for part in text.split(","):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise ValueError(f"--expect item {part!r} is not key=value")
        out[key.strip()] = value.strip()
    return out


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m repro_py.gates", description=__doc__.split("\n\n")[0])
    add_endpoint_arguments(p)
    p.add_argument("--expect", required=True,
                   help="the config the server should run, short keys: algorithm=ddtree,budget=8,topk=4,"
                   "window=2048,block_size=8 (algorithm defaults to ddtree; algorithm=none for the baseline)")
    p.add_argument("--reference", type=Path, default=None,
                   help="the baseline's lossless reference JSON (written by --write-reference against the baseline)")
    p.add_argument("--write-reference", type=Path, default=None,
                   help="write this server's lossless outputs as the reference JSON (the baseline only)")
    p.add_argument("--sampled-reference", type=Path, default=None,
                   help="the baseline's samples JSON for the sampled gate (written by --write-sampled-reference)")
    p.add_argument("--write-sampled-reference", type=Path, default=None,
                   help="write this server's samples as the sampled gate's reference JSON (the baseline only)")
    p.add_argument("--server-log", type=Path, default=None,
                   help="the server's log of this run (e.g. journalctl -u UNIT --invocation=0 > FILE), scanned for "
                        "the KV-window invariant and tracebacks")
    p.add_argument("--allow-unisolated", action="store_true",
                   help="judge candidate code even when no isolating sandbox (bubblewrap, namespaces) works here")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="coding eval max_tokens (default 1024)")
    p.add_argument("--min-coding-pass-rate", type=float, default=DEFAULT_MIN_PASS_RATE,
                   help=f"coding gate threshold (default {DEFAULT_MIN_PASS_RATE})")
    p.add_argument("--lossless-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                   help=f"max_new_tokens of each lossless prompt (default {DEFAULT_MAX_NEW_TOKENS})")
    p.add_argument("--gates", default=",".join(sorted(GATE_NAMES)),
                   help="the gates to run, comma-separated (default all: " + ",".join(sorted(GATE_NAMES)) + "); "
                   "e.g. config_echo,coding on a server without the baseline's references")
    p.add_argument("--out", type=Path, default=None, help="write the gates result JSON here (atomically)")
    return p


def _log_text(found: dict[str, Any]) -> str:
    if not found.get("scanned"):
        return f"server log not scanned ({found.get('reason')})"
    return f"server log: {found['lines']} lines scanned, " + ("clean" if found.get("passed") else "NOT clean")


def parse_gates(text: str) -> frozenset[str]:
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(names - GATE_NAMES)
    if unknown or not names:
        raise ValueError(f"--gates {text!r}: {', '.join(unknown) or 'no gate'} is not a gate; allowed: "
                         f"{', '.join(sorted(GATE_NAMES))}")  # fmt: skip
    return names


def summary(result: dict[str, Any]) -> str:
    lines = []
    if (echo := result.get("config_echo")) is not None:
        lines.append(f"config_echo: {'PASS' if echo['passed'] else 'FAIL'}"
                     + (f" ({echo['reason']})" if echo.get("reason") else ""))  # fmt: skip
    if (lossless := result.get("lossless")) is not None:
        det = lossless.get("deterministic") or {}
        lines.append(
            f"lossless:    {'PASS' if lossless['passed'] else 'FAIL'} {lossless['verdict']}: exact-match rate "
            f"{lossless['exact_match_rate']}, first divergence {lossless['first_divergence']}, deterministic "
            f"inference server={det.get('server')} reference={det.get('reference')}; "
            f"{_log_text(lossless['server_log'])}" + (f" ({lossless['reason']})" if lossless.get("reason") else "")
        )
    if (drawn := result.get("sampled")) is not None:
        lines.append(
            f"sampled:     {'PASS' if drawn['passed'] else 'FAIL'} {drawn['verdict']}: p={drawn['p_value']} (alpha "
            f"{drawn['alpha']}, the false-alarm rate), {drawn['requests']} requests at {drawn['setting']}"
            + (f" ({drawn['reason']})" if drawn.get("reason") and not drawn["passed"] else "")
        )
    if (coding := result.get("coding")) is not None:
        unisolated = " (UNISOLATED: allowed by --allow-unisolated)" if coding.get("isolation_mode") == "none" else ""
        lines.append(f"coding:      {'PASS' if coding['passed'] else 'FAIL'} {coding['pass_count']}/{coding['total']} "
                     f"{json.dumps({k: v for k, v in coding['counts'].items() if v})}"
                     + (f" ({coding['reason']})" if coding.get("reason") else ""))  # fmt: skip
        lines.append(f"sandbox:     {coding['isolation_mode']}{unisolated}: {coding['isolation']}")
    ran = ", ".join(sorted(GATE_NAMES & result.keys()))
    lines.append(f"gates:       {'PASS' if result['passed'] else 'FAIL'} ({ran})")
    return "\n".join(lines)


def _scan_log(result: dict[str, Any], path: Path | None) -> None:
    if path is None or "lossless" not in result:
        return
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError as exc:
        lines = [f"(journal unavailable: {exc})"]
    serverlog.apply(result["lossless"], serverlog.scan(lines, source=str(path)))
    result["passed"] = bool(result["passed"] and result["lossless"]["passed"])


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_or_exit_code(parser, argv)
    if isinstance(args, int):
        return args
    try:
        endpoint = endpoint_from_args(args)
        expected = validate(parse_expect(args.expect))
        reference = json.loads(args.reference.read_text(encoding="utf-8")) if args.reference else None
        drawn_ref = json.loads(args.sampled_reference.read_text(encoding="utf-8")) if args.sampled_reference else None
        if isinstance(drawn_ref, dict) and "schema" not in drawn_ref and isinstance(drawn_ref.get("reference"), dict):
            drawn_ref = drawn_ref["reference"]  # a sweep's sampled-reference.json: {label, config, reference}
        which = parse_gates(args.gates)
    except (ValueError, SpecConfigError, OSError) as exc:
        print(f"gates: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    try:
        if "coding" in which:
            mode = require_isolation(allow_unisolated=args.allow_unisolated)
            print(f"gates: coding sandbox mode {mode}", file=sys.stderr)
        result = asyncio.run(run_gates(
            endpoint, expected, reference, coding_max_tokens=args.max_tokens,
            min_coding_pass_rate=args.min_coding_pass_rate, lossless_max_new_tokens=args.lossless_tokens,
            allow_unisolated=args.allow_unisolated, sampled_reference=drawn_ref, which=which,
        ))
    except IsolationUnavailable as exc:
        print(f"gates: {exc}", file=sys.stderr)
        return int(ExitCode.NO_SANDBOX)
    except KeyboardInterrupt:
        print("gates: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    _scan_log(result, args.server_log)
    if args.write_reference is not None:
        lossless = result.get("lossless") or {"verdict": "not run (--gates)"}
        if lossless["verdict"] == "reference":
            write_json_atomic(args.write_reference, make_reference(
                lossless["output_ids"], max_new_tokens=lossless["max_new_tokens"],
                source=f"{endpoint.base_url} {expected.label}",
                deterministic=lossless["deterministic"]["server"] is True,
            ))
        else:
            print(f"gates: {args.write_reference} not written: a reference comes from the baseline's passing "
                  f"lossless run, this one is {lossless['verdict']}", file=sys.stderr)
    drawn = (result.get("sampled") or {}).pop("samples", None)
    if args.write_sampled_reference is not None:
        if drawn is not None:
            write_json_atomic(args.write_sampled_reference, sampled.make_reference(
                {**result["sampled"], "samples": drawn}, source=f"{endpoint.base_url} {expected.label}"))
        else:
            print(f"gates: {args.write_sampled_reference} not written: sampled references come from the baseline "
                  f"(algorithm=none) with no --sampled-reference, this run is "
                  f"{(result.get('sampled') or {'verdict': 'not run (--gates)'})['verdict']}",
                  file=sys.stderr)
    if args.out is not None:
        write_json_atomic(args.out, result)
    print(summary(result))
    return int(ExitCode.OK if result["passed"] else ExitCode.FAILURE)
