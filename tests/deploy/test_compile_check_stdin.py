"""cuda_toolkit's compile check takes its source on stdin, and reads all of it on every path.

The check is a shell script whose source arrives on stdin (the ``stdin:`` of its task). Its cached path used to exit
before reading stdin: when the script ended before Ansible wrote the source, the write met a closed pipe and the
task failed with "Error executing command." and rc 32 (EPIPE), so a converge of a host whose check was cached failed
now and then (a clean clone's run: the documented playbook's converge of the deployed test host). A source larger
than the pipe's buffer makes that deterministic: the write blocks until the script reads, and fails when it exits.

The task's own script, as verify.yml has it, runs here through Ansible's shell module on localhost, with a stand-in
nvcc that copies its input to its output.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from subprocess import CompletedProcess

import yaml

ROOT = Path(__file__).resolve().parents[2]
VERIFY = ROOT / "roles" / "cuda_toolkit" / "tasks" / "verify.yml"
TASK = "Compile a tiny .cu file (compile only; no GPU needed)"
SOURCE = "// " + "x" * 200_000 + "\n"  # more than a pipe holds (64 KiB)


def _task(tasks: list[dict[str, object]]) -> dict[str, object]:
    for task in tasks:
        if task.get("name") == TASK:
            return task
        found = _task(task.get("block", []) or [])  # type: ignore[arg-type]
        if found:
            return found
    return {}


def _play(tmp_path: Path) -> Path:
    shell = dict(_task(yaml.safe_load(VERIFY.read_text()))["ansible.builtin.shell"])  # type: ignore[arg-type]
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text('#!/bin/sh\n# nvcc -c SRC -o OBJ\ncp "$2" "$4"\n')
    nvcc.chmod(0o755)
    play = [{
        "name": "The compile check's script",
        "hosts": "localhost",
        "connection": "local",
        "gather_facts": False,
        "vars": {"ansible_python_interpreter": "{{ ansible_playbook_python }}", "cuda_toolkit_home": str(home),
                 "cuda_toolkit_compile_check_cache": True, "_cuda_toolkit_check_dir": str(tmp_path / "state"),
                 "_cuda_toolkit_compile_key": "the-key"},
        "tasks": [
            {"name": "Run it", "ansible.builtin.shell": {**shell, "stdin": SOURCE}, "register": "_run",
             "failed_when": False},
            {"name": "Keep the result",
             "ansible.builtin.copy": {"content": "{{ _run | to_json }}", "dest": str(tmp_path / "result.json"),
                                      "mode": "0644"}},
        ],
    }]  # fmt: skip
    path = tmp_path / "play.yml"
    path.write_text(yaml.safe_dump(play, sort_keys=False))
    return path


def _result(run_playbook: Callable[..., CompletedProcess[str]], play: Path) -> dict[str, object]:
    res = run_playbook("-i", "localhost,", str(play))
    assert res.returncode == 0, (res.stdout + res.stderr)[-3000:]
    return json.loads((play.parent / "result.json").read_text())  # type: ignore[no-any-return]


def test_the_cached_path_reads_the_whole_source_before_it_ends(
    run_playbook: Callable[..., CompletedProcess[str]], tmp_path: Path
) -> None:
    play = _play(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "compile-ok").write_text("the-key\n")
    result = _result(run_playbook, play)
    assert result["rc"] == 0, result
    assert result["stdout"] == "compiled before with this nvcc and source (cached)", result


def test_the_compiling_path_compiles_the_source_it_was_given_and_stamps_it(
    run_playbook: Callable[..., CompletedProcess[str]], tmp_path: Path
) -> None:
    result = _result(run_playbook, _play(tmp_path))
    assert result["rc"] == 0, result
    assert result["stdout"] == f"compiled {len(SOURCE) + 1} bytes of object code", result  # stdin_add_newline
    assert (tmp_path / "state" / "compile-ok").read_text() == "the-key\n"
