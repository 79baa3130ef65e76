"""Work on several hosts side by side, stopped together (a fleet sweep, the tuner on a fleet): one task per host;
Ctrl-C cancels every task at once (the config in flight on each is given back, never half-written) and a second
Ctrl-C stops the restores in flight; then each host's restore of the inventory's default config, and its lease
given back."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.markup import escape

from repro_py.sweep.fleethosts import FleetHost
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.sigint import with_sigint

_T = TypeVar("_T")


class HostTasks:
    def __init__(self, console: Console) -> None:
        self.console = console
        #: set by the first Ctrl-C: every host stops its config
        self.cancel = threading.Event()
        #: set by a second Ctrl-C: the restores in flight stop too
        self.restore_cancel = threading.Event()
        self.tasks: list[asyncio.Task[None]] = []

    def on_sigint(self) -> None:
        if self.cancel.is_set():
            self.restore_cancel.set()
            self.console.print("[yellow]Ctrl-C again: the restores in flight are stopped[/]")
            return
        self.cancel.set()
        self.console.print("[yellow]Ctrl-C: every host stops its config; then each host's default is restored "
                           "(Ctrl-C again skips that); the run stays resumable[/]")  # fmt: skip
        for task in self.tasks:
            task.cancel()

    async def guarded(self, body: Callable[[], Awaitable[_T]]) -> _T:
        """Run ``body`` with this Ctrl-C handling installed (where the event loop can install it)."""
        return await with_sigint(self.on_sigint, body)

    async def phase(self, coros: list[Coroutine[Any, Any, None]]) -> None:
        """Run one task per host until all are done (a task's exception is said, never lost)."""
        self.tasks = [asyncio.ensure_future(c) for c in coros]
        await asyncio.gather(*self.tasks, return_exceptions=True)
        for task in self.tasks:
            if not task.cancelled() and task.exception() is not None:
                exc = task.exception()
                self.console.print(f"[red]a host's worker raised {type(exc).__name__}: {escape(str(exc))}[/]")
        self.tasks = []


def restore_tried(cause: str | None) -> bool:
    """Whether a host that left the run for ``cause`` (None: it did not) is restarted into the default at the end:
    every host but one whose lease is another run's now (an unreachable one is tried, and its own failure said)."""
    return cause is None or not cause.startswith("host lease lost")


async def restore_host(
    host: FleetHost, cfg: PlannedConfig | None, private_dir: Path, cancel: threading.Event, *, cause: str | None = None
) -> dict[str, Any]:
    """Restart ``host`` into ``cfg`` (the inventory's default config); its restore record (``status`` ok, failed or
    not_configured). ``cause``: why the host left the run, if it did (a host whose lease is another run's now is
    not touched; an unreachable one is tried, and its own failure said)."""
    if cfg is None:
        return {"status": "not_configured", "reason": "the inventory has no sweep_default_config"}
    if not restore_tried(cause):
        return {"status": "failed", "reason": f"not restored: {cause} (it is another run's now)"}
    try:
        done = await asyncio.to_thread(functools.partial(
            host.reconfigurer.reconfigure, cfg, private_dir, cancel, restore=True,
        ))  # fmt: skip
    except Exception as exc:
        return {"status": "failed", "label": cfg.label, "reason": f"{type(exc).__name__}: {exc}"}
    return {**done.as_result(), "status": "ok" if done.ok else "failed", "label": cfg.label,
            "reason": None if done.ok else done.reason}  # fmt: skip


def restore_said(restore: dict[str, Any]) -> str:
    """``default config LABEL restored`` / ``... NOT restored: why``, for a restore that ran."""
    said = "restored" if restore["status"] == "ok" else f"NOT restored: {restore.get('reason')}"
    return f"default config {restore.get('label')} {said}"


async def release_host(host: FleetHost) -> str:
    """Give ``host``'s lease back and close its reconfigurer; what the lease said."""
    said = await asyncio.to_thread(host.release)
    host.close()
    return said
