"""The server configurations of the proof, their exact command lines, and running them.

On a GPU host every configuration is ``python -m sglang.launch_server`` with
the series applied (a patched copy of the pinned wheel first on PYTHONPATH).
In the CPU dry run the same command lines are built and parsed by the patched
sglang, and a stand-in server (standin_server.py: the tiny target decoded
greedily by transformers on CPU) answers /generate instead.
"""

# ruff: noqa: PLC0415 -- torch/sglang are imported where used: they come from the CPU venv and a patched tree put on sys.path at run time

from __future__ import annotations

import contextlib
import dataclasses
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

STANDIN = Path(__file__).resolve().parent / "standin_server.py"


@dataclasses.dataclass(frozen=True)
class Config:
    label: str
    block: int | None  # None: the baseline (no speculative decoding)
    budget: int | None
    overlap: bool


def configs(blocks: list[int], budgets: list[int]) -> tuple[Config, list[Config]]:
    base = Config("baseline", None, None, True)
    tree = [
        Config(f"ddtree-b{budget}-bs{block}-{'overlap' if overlap else 'sync'}", block, budget, overlap)
        for block in blocks
        for budget in budgets
        for overlap in (True, False)
    ]
    return base, tree


def server_argv(cfg: Config, paths: dict[str, Path], *, port: int, dtype: str, max_running: int,
                mem_fraction: float, deterministic: bool, topk_cap: int = 4) -> list[str]:  # fmt: skip
    """The exact sglang command line (after ``python -m sglang.launch_server``)."""
    argv = [
        "--model-path", str(paths["target"]), "--tokenizer-path", str(paths["tokenizer"]),
        "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype, "--attention-backend", "triton",
        "--page-size", "1", "--max-running-requests", str(max_running),
        "--cuda-graph-max-bs-decode", str(max_running), "--mem-fraction-static", str(mem_fraction),
        "--context-length", "2048", "--log-level", "info",
    ]  # fmt: skip
    if deterministic:
        argv.append("--enable-deterministic-inference")
    if not cfg.overlap:
        argv.append("--disable-overlap-schedule")
    if cfg.block is not None:
        argv += [
            "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", str(paths[f"drafter-b{cfg.block}"]),
            "--speculative-dflash-block-size", str(cfg.block), "--speculative-ddtree-budget", str(cfg.budget),
            "--speculative-ddtree-topk-cap", str(topk_cap),
        ]  # fmt: skip
    return argv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclasses.dataclass
class Running:
    cfg: Config
    port: int
    proc: subprocess.Popen[bytes]
    log_path: Path
    started: float

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def alive(self) -> bool:
        return self.proc.poll() is None

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to the server's own process group (it was started in a new session: the
        launcher and the scheduler / detokenizer processes it spawned), SIGKILL after timeout."""
        if self.proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)


def launch(cfg: Config, argv: list[str], *, python: str, out: Path, tree: Path | None, dry_run: bool,
           fault: str | None = None) -> Running:  # fmt: skip
    """Start one server; its stdout/stderr go to out/<label>.log."""
    port = int(argv[argv.index("--port") + 1])
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    if dry_run:
        cmd = [python, str(STANDIN), "--port", str(port), "--model-path", argv[argv.index("--model-path") + 1]]
        if fault and cfg.block is not None:
            cmd += ["--fault", fault]
    else:
        cmd = [python, "-m", "sglang.launch_server", *argv]
    log_path = out / f"{cfg.label}.log"
    log = log_path.open("wb")
    log.write((" ".join(cmd) + "\n").encode())
    log.flush()
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Running(cfg, port, proc, log_path, time.monotonic())


def parse_with_sglang(argv: list[str]) -> dict[str, object]:
    """Parse a command line with the patched sglang and resolve its speculative part
    (the drafter config is read from disk); return what it resolved to."""
    from sglang.srt.arg_groups import speculative_hook
    from sglang.srt.arg_groups.overrides import resolving_view
    from sglang.srt.server_args import prepare_server_args

    args = prepare_server_args(["--device", "cuda", *argv])
    if "--speculative-algorithm" in argv:
        speculative_hook.handle_speculative_decoding(args)
    cfg = resolving_view(args)
    return {
        "speculative_algorithm": cfg.speculative_algorithm,
        "speculative_ddtree_budget": cfg.speculative_ddtree_budget,
        "speculative_num_draft_tokens": cfg.speculative_num_draft_tokens,
        "disable_overlap_schedule": cfg.disable_overlap_schedule,
        "max_running_requests": cfg.max_running_requests,
        "attention_backend": cfg.attention_backend,
    }


def python_has_cuda(python: str) -> bool:
    probe = "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([python, "-c", probe], capture_output=True, check=False).returncode == 0


def this_python() -> str:
    return sys.executable
