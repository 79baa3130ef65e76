"""Command line of the gates: ``python -m repro_py.gates --url URL --expect algorithm=ddtree,budget=8,...``.

``-i INVENTORY`` instead of ``--url`` takes the URL, the model name and the API key
from the inventory, resolved as its plays resolve it (vault options as
ansible-playbook's); otherwise the key comes from ``$SGLANG_API_KEY``.

Runs the config echo, losslessness and coding gates against a running server.
Exit codes: 0 every gate passed; 1 a gate failed; 2 bad arguments; 130 interrupted.
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
from repro_py.exitcodes import ExitCode
from repro_py.gates import run_gates
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
    p.add_argument("--reference", type=Path, default=None, help="lossless reference JSON to compare against")
    p.add_argument("--write-reference", type=Path, default=None,
                   help="write this server's lossless outputs as a reference JSON")
    p.add_argument("--max-tokens", type=int, default=DEFAULT_MAX_TOKENS, help="coding eval max_tokens (default 1024)")
    p.add_argument("--min-coding-pass-rate", type=float, default=DEFAULT_MIN_PASS_RATE,
                   help=f"coding gate threshold (default {DEFAULT_MIN_PASS_RATE})")
    p.add_argument("--lossless-tokens", type=int, default=DEFAULT_MAX_NEW_TOKENS,
                   help=f"max_new_tokens of each lossless prompt (default {DEFAULT_MAX_NEW_TOKENS})")
    p.add_argument("--out", type=Path, default=None, help="write the gates result JSON here (atomically)")
    return p


def _summary(result: dict[str, Any]) -> str:
    coding, lossless, echo = result["coding"], result["lossless"], result["config_echo"]
    lines = [
        f"config_echo: {'PASS' if echo['passed'] else 'FAIL'}" + (f" ({echo['reason']})" if echo.get("reason") else ""),
        f"lossless:    {'PASS' if lossless['passed'] else 'FAIL'} exact-match rate "
        f"{lossless['exact_match_rate']}, first divergence {lossless['first_divergence']}"
        + (f" ({lossless['reason']})" if lossless.get("reason") else ""),
        f"coding:      {'PASS' if coding['passed'] else 'FAIL'} {coding['pass_count']}/{coding['total']} "
        f"{json.dumps({k: v for k, v in coding['counts'].items() if v})} isolation: {coding['isolation']}"
        + (f" ({coding['reason']})" if coding.get("reason") else ""),
        f"gates:       {'PASS' if result['passed'] else 'FAIL'}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parse_or_exit_code(parser, argv)
    if isinstance(args, int):
        return args
    try:
        endpoint = endpoint_from_args(args)
        expected = validate(parse_expect(args.expect))
        reference = json.loads(args.reference.read_text(encoding="utf-8")) if args.reference else None
    except (ValueError, SpecConfigError, OSError) as exc:
        print(f"gates: {exc}", file=sys.stderr)
        return int(ExitCode.USAGE)
    try:
        result = asyncio.run(run_gates(
            endpoint, expected, reference, coding_max_tokens=args.max_tokens,
            min_coding_pass_rate=args.min_coding_pass_rate, lossless_max_new_tokens=args.lossless_tokens,
        ))
    except KeyboardInterrupt:
        print("gates: interrupted", file=sys.stderr)
        return int(ExitCode.INTERRUPTED)
    if args.write_reference is not None:
        lossless = result["lossless"]
        source = f"{endpoint.base_url} {expected.label}"
        write_json_atomic(args.write_reference, make_reference(
            lossless["output_ids"], max_new_tokens=lossless["max_new_tokens"], source=source,
        ))
    if args.out is not None:
        write_json_atomic(args.out, result)
    print(_summary(result))
    return int(ExitCode.OK if result["passed"] else ExitCode.FAILURE)
