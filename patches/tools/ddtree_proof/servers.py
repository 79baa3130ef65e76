"""The proof's server command lines and running them.

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

from . import plan as P
from . import sampled as SAMPLED
from .plan import Config

STANDIN = Path(__file__).resolve().parent / "standin_server.py"
TOPK_CAP = 4


def server_argv(cfg: Config, paths: dict[str, Path], *, port: int, dtype: str, mem_fraction: float,
                deterministic: bool) -> list[str]:  # fmt: skip
    """The exact sglang command line (after ``python -m sglang.launch_server``): chunked
    prefill, a KV pool small enough to retract, the context the near-end prompts reach.
    The sampled part's servers serve the softened target, up to sampled.MAX_RUNNING requests at
    once, without deterministic inference (its seeded coins would repeat one sample)."""
    if cfg.sampled:
        argv = [
            "--model-path", str(paths["target-sampled"]), "--tokenizer-path", str(paths["tokenizer"]),
            "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype, "--attention-backend", "triton",
            "--page-size", "1", "--max-running-requests", str(SAMPLED.MAX_RUNNING),
            "--cuda-graph-max-bs-decode", str(SAMPLED.MAX_RUNNING), "--mem-fraction-static", str(mem_fraction),
            "--context-length", str(P.CONTEXT_LEN), "--log-level", "info",
        ]  # fmt: skip
        deterministic = False
    else:
        argv = [
            "--model-path", str(paths["target"]), "--tokenizer-path", str(paths["tokenizer"]),
            "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype, "--attention-backend", "triton",
            "--page-size", "1", "--max-running-requests", str(P.MAX_RUNNING),
            "--cuda-graph-max-bs-decode", str(P.MAX_RUNNING), "--mem-fraction-static", str(mem_fraction),
            "--max-total-tokens", str(P.MAX_TOTAL_TOKENS), "--chunked-prefill-size", str(P.CHUNKED_PREFILL),
            "--context-length", str(P.CONTEXT_LEN), "--log-level", "info",
        ]  # fmt: skip
    if deterministic:
        argv.append("--enable-deterministic-inference")
    if not cfg.overlap:
        argv.append("--disable-overlap-schedule")
    if cfg.block is not None:
        argv += [
            "--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", str(paths[f"drafter-b{cfg.block}"]),
            "--speculative-dflash-block-size", str(cfg.block), "--speculative-ddtree-budget", str(cfg.budget),
            "--speculative-ddtree-topk-cap", str(TOPK_CAP),
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
           paths: dict[str, Path], fault: str | None = None) -> Running:  # fmt: skip
    """Start one server; its stdout/stderr go to out/<label>.log. On a GPU it runs with the
    page invariant checks and forced retraction on (plan.SERVER_ENV)."""
    port = int(argv[argv.index("--port") + 1])
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if tree is not None:
        env["PYTHONPATH"] = str(tree)
    if dry_run:
        cmd = [python, "-m", "ddtree_proof.standin_server", "--port", str(port),
               "--model-path", argv[argv.index("--model-path") + 1]]  # fmt: skip
        env["PYTHONPATH"] = os.pathsep.join([str(STANDIN.parents[1]), *([str(tree)] if tree else [])])
        if cfg.block is not None:
            drafter = str(paths[f"drafter-b{cfg.block}"])
            cmd += ["--drafter", drafter, "--budget", str(cfg.budget), "--topk", str(TOPK_CAP)]
            if fault:
                cmd += ["--fault", fault]
    else:
        env.update(P.SAMPLED_SERVER_ENV if cfg.sampled else P.SERVER_ENV)
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
        "chunked_prefill_size": cfg.chunked_prefill_size,
        "max_total_tokens": cfg.max_total_tokens,
    }


def python_has_cuda(python: str) -> bool:
    probe = "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([python, "-c", probe], capture_output=True, check=False).returncode == 0


def this_python() -> str:
    return sys.executable
