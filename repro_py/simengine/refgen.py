"""Generate ``sglang_reference.json``: what the simulated engine must match, read from the sglang 0.5.23 wheel.

Run it with the Python of the CPU sglang venv (``make cpu-venv``), from the
repository root::

    .venv-sglang-cpu/bin/python -m repro_py.simengine.refgen --write    # regenerate the data file
    .venv-sglang-cpu/bin/python -m repro_py.simengine.refgen --check    # exit 1 if it is stale

What it records, and from where:

``server_args``       every ``ServerArgs`` field of the pristine wheel and of the wheel with
                      the DDTree patch series applied (``record_fields``), with the resolved
                      value of a minimal command line (``resolved_dict()``), i.e. the keys
                      ``GET /server_info`` reports
``server_info``       the keys ``/server_info`` adds to those (``build_server_info``, the
                      scheduler's ready message, the ``server_info`` route); each one is
                      checked to appear in the wheel's source
``metrics``           every metric family the scheduler and tokenizer collectors register
                      (``observability/metrics_collector.py``, read as source: name, type,
                      documentation, label names, buckets, multiprocess mode, and the
                      condition it is registered under), plus the base label sets
``protocol``          fields of ``ErrorResponse``, ``UsageInfo``, ``StreamOptions`` and the
                      request models, union member tags, the routes' lines, the ``/generate``
                      contract, and sglang's own verdict (status and error body, from
                      ``sglang_oracle``) on every body of ``refgen_cases.REQUEST_CASES``
                      (``refgen_protocol``)
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from repro_py.atomicio import write_text_atomic
from repro_py.simengine import refgen_protocol

REPO_ROOT = Path(__file__).resolve().parents[2]
DATA_FILE = Path(__file__).with_name("sglang_reference.json")
MINIMAL_ARGV = ["--model-path", "/models/target", "--device", "cuda"]
METRIC_KINDS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary",
                "GaugeHistogram": "gauge"}
COLLECTORS = {"SchedulerMetricsCollector": "scheduler", "TokenizerMetricsCollector": "tokenizer"}

# Keys /server_info adds to the resolved ServerArgs, with the source line that adds each
# (paths relative to the wheel's sglang/srt/). Each needle must occur in that file.
SERVER_INFO_KEYS: tuple[tuple[str, str, str], ...] = (
    ("launch_command", "utils/common.py", 'result["launch_command"] = server_args.launch_command'),
    ("status", "managers/scheduler.py", '"status": "ready",'),
    ("max_total_num_tokens", "managers/scheduler.py", '"max_total_num_tokens": self.max_total_num_tokens,'),
    ("max_req_input_len", "managers/scheduler.py", '"max_req_input_len": self.max_req_input_len,'),
    ("startup_time", "entrypoints/http_server.py", '"startup_time": _global_state.tokenizer_manager.startup_time,'),
    ("hicache_object_layout", "managers/scheduler.py", 'result_dict["hicache_object_layout"]'),
    ("kv_events", "utils/common.py", 'result["kv_events"] = describe_kv_events_publisher(server_args)'),
    ("internal_states", "entrypoints/http_server.py", '"internal_states": internal_states,'),
    ("version", "entrypoints/http_server.py", '"version": __version__,'),
    ("frontend", "entrypoints/http_server.py", '"frontend": "python",'),
)

# ---------------------------------------------------------------- metrics (source, no import)


class _Unresolved(Exception):
    pass


def _literal(node: ast.AST | None, scope: Mapping[str, ast.AST], module_consts: Mapping[str, Any]) -> Any:
    """Evaluate the few expression shapes the collector uses for docs and buckets."""
    if node is None:
        return None
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.Name):
        if node.id in scope:
            return _literal(scope[node.id], {}, module_consts)
        if node.id in module_consts:
            return module_consts[node.id]
        raise _Unresolved(node.id)
    if isinstance(node, ast.JoinedStr):
        parts: list[str] = []
        for value in node.values:
            if isinstance(value, ast.Constant):
                parts.append(str(value.value))
            elif isinstance(value, ast.FormattedValue):
                parts.append(str(_eval_call_or_join(value.value, scope, module_consts)))
        return "".join(parts)
    if isinstance(node, ast.Tuple | ast.List):
        items = [_literal(elt, scope, module_consts) for elt in node.elts]
        return tuple(items) if isinstance(node, ast.Tuple) else items
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _literal(node.left, scope, module_consts) + _literal(node.right, scope, module_consts)
    return _eval_call_or_join(node, scope, module_consts)


def _eval_call_or_join(node: ast.AST, scope: Mapping[str, ast.AST], module_consts: Mapping[str, Any]) -> Any:
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "join":
        sep = _literal(node.func.value, scope, module_consts)
        return str(sep).join(str(x) for x in _literal(node.args[0], scope, module_consts))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        kwargs = {k.arg: k.value for k in node.keywords if k.arg}
        if node.func.id == "exponential_buckets":  # observability/utils.py: start * width**i
            start = _literal(kwargs.get("start"), scope, module_consts)
            width = _literal(kwargs.get("width"), scope, module_consts)
            length = _literal(kwargs.get("length"), scope, module_consts)
            return [start * (width**i) for i in range(length)]
        if node.func.id == "generate_buckets":  # no configured rule -> sorted(set(default))
            return sorted(set(_literal(node.args[1], scope, module_consts)))
        if node.func.id == "list" and node.args:
            return list(_literal(node.args[0], scope, module_consts))
    raise _Unresolved(ast.unparse(node))


def _module_consts(tree: ast.Module) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                out[node.targets[0].id] = _literal(node.value, {}, out)
            except (_Unresolved, ValueError, TypeError):
                continue
    return out


def _label_extras(node: ast.AST | None) -> list[str]:
    """``labels.keys()``, ``list(labels.keys()) + ["x"]``, ``[*labels.keys(), "x"]`` -> ``["x"]``."""
    if node is None:
        return []
    return [
        sub.value for sub in ast.walk(node) if isinstance(sub, ast.Constant) and isinstance(sub.value, str)
    ]


def _walk_with_conditions(node: ast.AST, conds: tuple[str, ...] = ()) -> Iterator[tuple[ast.AST, tuple[str, ...]]]:
    yield node, conds
    if isinstance(node, ast.If):
        test = ast.unparse(node.test)
        for child in node.body:
            yield from _walk_with_conditions(child, (*conds, test))
        for child in node.orelse:
            yield from _walk_with_conditions(child, (*conds, f"not ({test})"))
        return
    for sub in ast.iter_child_nodes(node):
        yield from _walk_with_conditions(sub, conds)


def _dict_keys(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Dict):
        return [k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return []


def base_labels(source: str) -> dict[str, list[str]]:
    """The label dicts the scheduler (``labels = {...}`` before the collector is built) and the
    tokenizer (``tokenizer_metric_labels()``) pass to their collectors."""
    tree = ast.parse(source)
    out: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "tokenizer_metric_labels":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign) and _dict_keys(sub.value):
                    out["tokenizer"] = _dict_keys(sub.value)
                    break
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            keys = _dict_keys(node.value)
            if node.targets[0].id == "labels" and "tp_rank" in keys and "scheduler" not in out:
                out["scheduler"] = keys
    return out


def metric_families(source: str, consts: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every ``Counter/Gauge/Histogram/Summary/GaugeHistogram(name="sglang:...")`` of the two collectors."""
    tree = ast.parse(source)
    module_consts = {**_module_consts(tree), **consts}
    families: list[dict[str, Any]] = []
    for cls in tree.body:
        if not isinstance(cls, ast.ClassDef) or cls.name not in COLLECTORS:
            continue
        init = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        scope: dict[str, ast.AST] = {}
        for node, conds in _walk_with_conditions(init):
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                scope[node.targets[0].id] = node.value
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in METRIC_KINDS):
                continue
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            name_node = kw.get("name")
            if not (isinstance(name_node, ast.Constant) and str(name_node.value).startswith("sglang:")):
                continue
            gauge_histogram = node.func.id == "GaugeHistogram"  # utils/gauge_histogram.py: a Gauge + gt/le
            bucket_node = kw.get("bucket_bounds" if gauge_histogram else "buckets")
            buckets: list[float] | None = None
            if bucket_node is not None:
                try:
                    buckets = [float(b) for b in _literal(bucket_node, scope, module_consts)]
                except _Unresolved:
                    buckets = None  # depends on the runtime configuration
            mode = kw.get("multiprocess_mode")
            extras = _label_extras(kw.get("labelnames"))
            conditions = [c for c in conds if "bucket" not in c]  # bucket defaults are not registration guards
            families.append({
                "name": name_node.value,
                "type": "gauge" if gauge_histogram else METRIC_KINDS[node.func.id],
                "kind": node.func.id,
                "collector": COLLECTORS[cls.name],
                "documentation": _literal(kw.get("documentation"), scope, module_consts),
                "extra_labels": [*extras, "gt", "le"] if gauge_histogram else extras,
                "buckets": buckets,
                "multiprocess_mode": (
                    ast.literal_eval(mode) if mode is not None else "mostrecent" if gauge_histogram else None
                ),
                "condition": " and ".join(conditions) or None,
            })
    return families


# ---------------------------------------------------------------- probes run under the sglang Python

_ARGS_PROBE = r"""
import json, sys
from sglang.srt.server_args import ServerArgs, prepare_server_args
from sglang.srt.arg_groups.arg_utils import record_fields
import sglang
out = {"file": sglang.__file__, "fields": [f.name for f in record_fields(ServerArgs)]}
if sys.argv[1:]:
    resolved = prepare_server_args(json.loads(sys.argv[1])).resolved_dict()
    out["defaults"] = json.loads(json.dumps(resolved, default=repr))
print(json.dumps(out))
"""

def _run_probe(code: str, args: list[str], pythonpath: list[Path]) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(str(p) for p in pythonpath)
    proc = subprocess.run(
        [sys.executable, "-c", code, *args], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"refgen: probe failed under {sys.executable}:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _series() -> Any:
    sys.path.insert(0, str(REPO_ROOT / "patches" / "tools"))
    import series  # type: ignore[import-not-found]  # noqa: PLC0415 - stdlib-only helper of the patch series

    return series


def generate() -> dict[str, Any]:
    series = _series()
    wheel = Path(series.fetch_wheel())
    with tempfile.TemporaryDirectory(prefix="sglang-ref-") as tmp:
        tree = Path(series.patched_tree(Path(tmp) / "tree"))
        srt = tree / "sglang" / "srt"
        pristine = _run_probe(_ARGS_PROBE, [], [])
        patched = _run_probe(_ARGS_PROBE, [json.dumps(MINIMAL_ARGV)], [tree])
        if Path(patched["file"]).resolve().parents[1] != tree.resolve():
            raise SystemExit(f"refgen: sglang imported from {patched['file']}, not the patched tree {tree}")
        protocol = refgen_protocol.generate(tree)
        missing = [
            f"{key}: {path} lacks {needle!r}"
            for key, path, needle in SERVER_INFO_KEYS
            if needle not in (srt / path).read_text(encoding="utf-8")
        ]
        if missing:
            raise SystemExit("refgen: the wheel no longer adds these /server_info keys:\n" + "\n".join(missing))
        collector_src = (srt / "observability" / "metrics_collector.py").read_text(encoding="utf-8")
        stage_consts = _module_consts(ast.parse((srt / "observability" / "scheduler_stage_metrics.py").read_text()))
    fields = list(patched["fields"])
    return {
        "sglang_version": series.SGLANG_VERSION,
        "wheel": {"name": wheel.name, "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()},
        "generated_by": ".venv-sglang-cpu/bin/python -m repro_py.simengine.refgen --write",
        "server_args": {
            "fields": fields,
            "patch_series_fields": [f for f in fields if f not in set(pristine["fields"])],
            "pristine_count": len(pristine["fields"]),
            "argv": MINIMAL_ARGV,
            "defaults": patched["defaults"],
        },
        "server_info_keys": [key for key, _path, _needle in SERVER_INFO_KEYS],
        "metric_labels": base_labels(collector_src),
        "metrics": metric_families(collector_src, stage_consts),
        "protocol": protocol,
    }


def render(data: Mapping[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m repro_py.simengine.refgen", description=__doc__.split("\n")[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help=f"regenerate {DATA_FILE.name}")
    mode.add_argument("--check", action="store_true", help=f"exit 1 if {DATA_FILE.name} differs from the wheel")
    mode.add_argument("--print", action="store_true", help="print the generated data")
    args = parser.parse_args(argv)
    text = render(generate())
    if args.print:
        sys.stdout.write(text)
        return 0
    if args.check:
        current = DATA_FILE.read_text(encoding="utf-8") if DATA_FILE.is_file() else ""
        if current != text:
            print(f"refgen: {DATA_FILE} is stale; run with --write", file=sys.stderr)
            return 1
        print(f"refgen: {DATA_FILE.name} matches the wheel")
        return 0
    write_text_atomic(DATA_FILE, text)
    print(f"refgen: wrote {DATA_FILE}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
