"""Static checks of the DDTree worker path (patch 0007), which cannot run
without a GPU: every `self.<name>` it reads exists on the worker class, and
every keyword argument it passes to SGLang functions, methods and dataclasses
is a parameter / field of the callee (resolved through the imports of the
patched 0.5.23 tree, re-exports included)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

WORKER = "sglang/srt/speculative/dflash_worker_v2.py"
DDTREE_METHODS = ("_init_ddtree", "_ddtree_draft_topk", "_ddtree_verify_and_commit")


def _module_path(tree: Path, module: str) -> Path | None:
    base = tree / Path(*module.split("."))
    for cand in (base.with_suffix(".py"), base / "__init__.py"):
        if cand.exists():
            return cand
    return None


def _parse(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def _resolve(tree: Path, module: str, name: str, depth: int = 0):
    """(module ast, def/class node) for `name` as defined or re-exported by `module`."""
    path = _module_path(tree, module)
    if path is None or depth > 4:
        return None
    mod = _parse(path)
    for node in mod.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            return mod, node
    for node in ast.walk(mod):
        if isinstance(node, ast.ImportFrom) and node.module and any(a.name == name for a in node.names):
            found = _resolve(tree, node.module, name, depth + 1)
            if found:
                return found
    return None


def _params(fn: ast.FunctionDef) -> tuple[set[str], bool]:
    a = fn.args
    names = {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs}
    return names, a.kwarg is not None


def _class_fields(tree: Path, mod: ast.Module, cls: ast.ClassDef, depth: int = 0) -> set[str]:
    fields = {n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)}
    imports = {
        a.asname or a.name: node.module
        for node in ast.walk(mod)
        if isinstance(node, ast.ImportFrom) and node.module
        for a in node.names
    }
    for base in cls.bases:
        if isinstance(base, ast.Name) and depth < 4:
            local = next((n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == base.id), None)
            if local is not None:
                fields |= _class_fields(tree, mod, local, depth + 1)
            elif base.id in imports:
                found = _resolve(tree, imports[base.id], base.id)
                if found and isinstance(found[1], ast.ClassDef):
                    fields |= _class_fields(tree, found[0], found[1], depth + 1)
    return fields


@pytest.fixture(scope="module")
def worker(patched_tree):
    mod = _parse(patched_tree / WORKER)
    cls = next(n for n in mod.body if isinstance(n, ast.ClassDef) and n.name == "DFlashWorkerV2")
    return patched_tree, mod, cls


def _ddtree_methods(cls):
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    missing = [m for m in DDTREE_METHODS if m not in methods]
    assert not missing, f"DDTree methods missing from the worker: {missing}"
    return [methods[m] for m in DDTREE_METHODS]


def test_self_attributes_exist(worker):
    _, _, cls = worker
    defined = {n.name for n in cls.body if isinstance(n, ast.FunctionDef)}
    for node in ast.walk(cls):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for sub in ast.walk(t):
                    if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id == "self":
                        defined.add(sub.attr)
    used = set()
    for fn in _ddtree_methods(cls):
        for node in ast.walk(fn):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                used.add(node.attr)
    # properties / attributes of the base classes
    inherited = {"target_worker", "model_runner", "device"}
    unknown = sorted(used - defined - inherited)
    assert not unknown, f"the DDTree worker methods read undefined attributes: {unknown}"


def test_keyword_arguments_match_callees(worker):
    tree, mod, cls = worker
    imports = {
        a.asname or a.name: node.module
        for node in ast.walk(mod)
        if isinstance(node, ast.ImportFrom) and node.module
        for a in node.names
    }
    methods = {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}
    checked, problems = 0, []
    for fn in _ddtree_methods(cls):
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            kws = {k.arg for k in call.keywords if k.arg}
            if not kws:
                continue
            target = None
            f = call.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
                if f.attr in methods:
                    target = (mod, methods[f.attr])
            elif isinstance(f, ast.Name) and f.id in imports:
                target = _resolve(tree, imports[f.id], f.id)
            if target is None:
                continue
            tmod, node = target
            if isinstance(node, ast.ClassDef):
                allowed, open_kw = _class_fields(tree, tmod, node), False
            else:
                allowed, open_kw = _params(node)
            checked += 1
            if not open_kw and not kws <= allowed:
                problems.append(f"{ast.unparse(f)}: unknown keyword(s) {sorted(kws - allowed)}")
    assert checked >= 8, f"only {checked} calls resolved; the checker lost track of the code"
    assert not problems, "\n".join(problems)


# Methods called on objects whose type the AST cannot see: (module, class, method).
OBJECT_METHODS = {
    "plan": ("sglang.srt.mem_cache.kv_index_translator", "KVIndexTranslator", "plan"),
    "prepare_for_verify": ("sglang.srt.speculative.dflash_info", "DFlashVerifyInput", "prepare_for_verify"),
    "forward_batch_generation": ("sglang.srt.managers.tp_worker", "TpModelWorker", "forward_batch_generation"),
    "write_ids": ("sglang.srt.mem_cache.kv_loc_plan", "KVLocPlan", "write_ids"),
}


def test_keyword_arguments_of_object_methods(worker):
    tree, _, cls = worker
    seen, problems = set(), []
    for fn in _ddtree_methods(cls):
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            f = call.func
            if not (isinstance(f, ast.Attribute) and f.attr in OBJECT_METHODS):
                continue
            module, cls_name, meth = OBJECT_METHODS[f.attr]
            found = _resolve(tree, module, cls_name)
            assert found and isinstance(found[1], ast.ClassDef), f"{module}.{cls_name} not found"
            target = next((n for n in found[1].body if isinstance(n, ast.FunctionDef) and n.name == meth), None)
            assert target is not None, f"{cls_name}.{meth} not found"
            allowed, open_kw = _params(target)
            kws = {k.arg for k in call.keywords if k.arg}
            positional = len(call.args)
            seen.add(f.attr)
            if not open_kw and not kws <= allowed:
                problems.append(f"{ast.unparse(f)}: unknown keyword(s) {sorted(kws - allowed)}")
            if positional > len(target.args.posonlyargs + target.args.args) - 1:
                problems.append(f"{ast.unparse(f)}: {positional} positional arguments")
    assert seen == set(OBJECT_METHODS), f"calls not found: {set(OBJECT_METHODS) - seen}"
    assert not problems, "\n".join(problems)
