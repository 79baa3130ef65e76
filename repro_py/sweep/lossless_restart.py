"""Where the lossless gate runs: in a restart of its own, or in the restart that gives the figures.

The lossless gate (``repro_py.gates.lossless``) is an exact oracle: greedy outputs equal, token for token, to
the baseline's, which proves something only when both servers run sglang's ``--enable-deterministic-inference``
(role variable ``sglang_service_deterministic_inference``). That mode swaps in batch-invariant kernels and the
pytorch sampler: it is slower (the SGLang team's post introducing it, lmsys.org/blog/2025-09-22-sglang-deterministic,
reports a 34% overhead with CUDA graphs) and it is not how a host serves, so figures measured under it are not
production figures and rankings made on them may not carry over.

``separate`` (the default) keeps the two apart: every config is restarted as configured (the inventory's own
``sglang_service_deterministic_inference``, exactly the unit the operator would deploy) for the benchmark, the
coding gate and the config echo, and restarted again with deterministic inference for the lossless gate. Two
restarts per config; one when the inventory already deploys deterministic inference (the production restart then
serves the lossless gate too). ``shared``: one restart per config, with deterministic inference for everything,
the benchmark included: half the restarts, and every figure is a deterministic-inference figure and says so.
There is no mode without the gate. The mode's values and labels, as a run's files record them, are
:mod:`repro_py.results.lossless_mode` (the report reads them there).
"""

from __future__ import annotations

import argparse
import dataclasses
from collections.abc import Mapping
from typing import Any

from repro_py.results.lossless_mode import DETERMINISTIC_LABEL, FLAG, MODES, SEPARATE, SHARED, stored_mode
from repro_py.sweep.errors import PlanError
from repro_py.sweep.extravars import DETERMINISTIC_VAR
from repro_py.sweep.inventory import Target

#: the gates a production restart runs when the lossless gate has a restart of its own, and the one that has it
PRODUCTION_GATES = frozenset({"coding", "sampled", "config_echo"})
LOSSLESS_GATES = frozenset({"lossless"})
#: ``gates.lossless.restart``: which restart the lossless gate ran on
ON_OWN_RESTART = "own"  # its own restart with deterministic inference (``lossless_reconfigure`` in the result)
ON_PRODUCTION = "production"  # the production restart, which already runs deterministic inference (inventory)
ON_SHARED = "shared"  # the one restart of --lossless-restart shared
ON_NO_RESTART = "none"  # not made: no baseline reference to compare with (verdict no_baseline)
WHY = (
    "the lossless gate is an exact oracle only when both servers run --enable-deterministic-inference, which is "
    "slower and not how the host serves"
)


@dataclasses.dataclass(frozen=True)
class LosslessRestart:
    """The run's mode and what follows from it for each config."""

    mode: str = SEPARATE
    #: the inventory's own ``sglang_service_deterministic_inference`` (the production unit runs it)
    inventory_deterministic: bool = False

    @property
    def production_deterministic(self) -> bool:
        """Whether the restart that gives the figures runs deterministic inference."""
        return self.mode == SHARED or self.inventory_deterministic

    @property
    def own_restart(self) -> bool:
        """Whether the lossless gate needs a restart of its own."""
        return self.mode == SEPARATE and not self.inventory_deterministic

    @property
    def restarts_per_config(self) -> int:
        return 2 if self.own_restart else 1

    @property
    def gate_runs_on(self) -> str:
        if self.mode == SHARED:
            return ON_SHARED
        return ON_OWN_RESTART if self.own_restart else ON_PRODUCTION

    @property
    def figures(self) -> str:
        """What the figures are, in a few words."""
        if self.mode == SHARED:
            return f"{DETERMINISTIC_LABEL} ({FLAG} shared: not the production config)"
        if self.inventory_deterministic:
            return f"{DETERMINISTIC_LABEL} (the inventory deploys it: {DETERMINISTIC_VAR} is true)"
        return "as deployed (the inventory's config, no deterministic inference)"

    def summary(self) -> str:
        """Which mode, what it measures, what it costs and why (the console and the plan say it)."""
        if self.mode == SHARED:
            return (
                f"lossless gate: {FLAG} shared: one restart per config with --enable-deterministic-inference for the "
                f"benchmark and every gate; every figure is a {DETERMINISTIC_LABEL} figure, not the production "
                f"config's, and is labelled so ({WHY})"
            )
        if self.inventory_deterministic:
            return (
                f"lossless gate: {FLAG} separate: one restart per config: the inventory deploys deterministic "
                f"inference ({DETERMINISTIC_VAR}: true), so the production restart serves the figures and the lossless "
                f"gate alike ({WHY})"
            )
        return (
            f"lossless gate: {FLAG} separate: two restarts per config: as configured (the production unit) for the "
            "benchmark, the coding gate and the config echo, then with --enable-deterministic-inference for the "
            f"lossless gate alone, compared with the baseline's deterministic outputs ({WHY})"
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "mode": self.mode,
            "inventory_deterministic": self.inventory_deterministic,
            "restarts_per_config": self.restarts_per_config,
            "figures_deterministic": self.production_deterministic,
            "figures": self.figures,
            "gate_runs_on": self.gate_runs_on,
            "summary": self.summary(),
        }


def add_argument(p: argparse.ArgumentParser) -> None:
    """``--lossless-restart`` for the sweep's and the tuner's command lines (no default: a resumed run keeps its)."""
    p.add_argument(
        FLAG, choices=MODES, default=None,
        help="separate (default): each config restarted as configured for the benchmark, coding gate and config "
        "echo, and again with --enable-deterministic-inference for the lossless gate (2 restarts per config; 1 when "
        "the inventory deploys deterministic inference); shared: one restart per config with deterministic "
        "inference for everything (every figure labelled so). A resumed run keeps its mode",
    )  # fmt: skip


def check_mode(mode: str) -> str:
    if mode not in MODES:
        raise PlanError([f"{FLAG} {mode!r}: allowed: {', '.join(MODES)} (the lossless gate is never skipped)"])
    return mode


def resolve(mode: str, target: Target) -> LosslessRestart:
    """The mode for ``target``: whether its inventory already deploys deterministic inference."""
    return LosslessRestart(check_mode(mode), inventory_deterministic=target.var(DETERMINISTIC_VAR) is True)


def resume_mode(given: str | None, stored: Mapping[str, Any] | None, *, run: str) -> str:
    """The mode of a run: the flag, else the resumed run's, else ``separate``. A resumed run keeps its mode: another
    would put figures of two kinds side by side in one run."""
    if stored is None:
        return check_mode(given or SEPARATE)
    recorded = stored_mode(stored)
    if recorded is None:
        if given is None:
            raise PlanError([
                f"--resume: run {run} was planned before {FLAG} existed (every config it measured ran deterministic "
                f"inference): pass {FLAG} shared to continue it as it ran, or start a new run"
            ])  # fmt: skip
        return check_mode(given)
    if given is not None and given != recorded:
        raise PlanError([
            f"--resume: run {run} measures with {FLAG} {recorded}; {FLAG} {given} differs (start a new run for "
            "another mode)"
        ])  # fmt: skip
    return check_mode(recorded)


def restarts_of(result: Mapping[str, Any]) -> int:
    """The engine restarts one config's result took: its production restart, and its lossless gate's own."""
    return 1 + (1 if isinstance(result.get("lossless_reconfigure"), Mapping) else 0)
