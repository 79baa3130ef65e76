"""Everything the tuner takes from the sweep, in one place.

The tuner restarts, measures and records exactly as a sweep does: the same
plan validation (``repro_py.spec_config`` through the sweep planner), the same
reconfigurers (ansible-runner on ``playbooks/reconfigure.yml``, or the local
simulated-engine process), the same per-config loop and result schema, run
directory, fingerprints, report and manifest. Other tuner modules import
these names from here only, so a reorganisation of ``repro_py.sweep`` is a
change to this file alone.
"""

from __future__ import annotations

from repro_py.codeeval.sandbox import IsolationUnavailable
from repro_py.gates import GATE_NAMES
from repro_py.report.render import build_report
from repro_py.results.failures import GATE_FAILED
from repro_py.sweep.benchplan import BenchPlan
from repro_py.sweep.cmdline import RUN_ID_RE, default_run_id, parse_extra_vars
from repro_py.sweep.errors import PlanError
from repro_py.sweep.estimate import format_duration
from repro_py.sweep.fingerprint import controller_fingerprint
from repro_py.sweep.grid import SIM_FAULT_KEY, PlannedConfig, expand_grid, validate_all, validate_config
from repro_py.sweep.inventory import (
    Target,
    access_from_args,
    load_target,
    load_targets,
    reload_target,
    source_args,
    target_from_args,
)
from repro_py.sweep.inventory import add_arguments as add_inventory_arguments
from repro_py.sweep.localproc import LocalProcessReconfigurer, local_reconfigurer
from repro_py.sweep.lossless_restart import LOSSLESS_GATES, LosslessRestart, restarts_of, resume_mode
from repro_py.sweep.lossless_restart import add_argument as add_lossless_restart
from repro_py.sweep.measure import BundleMeasure, Measure, coding_sandbox
from repro_py.sweep.messages import print_gates, print_resume, refuse_unisolated, resume_command
from repro_py.sweep.plan import Plan, make_plan
from repro_py.sweep.reconfigure import AnsibleReconfigurer, Reconfigurer
from repro_py.sweep.runner import Interrupted, SweepOptions, SweepRunner
from repro_py.sweep.state import (
    STATE_COMPLETE,
    STATE_INTERRUPTED,
    STATE_RUNNING,
    RunDir,
    decide,
    latest_resumable,
    now_iso,
)

__all__ = [
    "GATE_FAILED",
    "GATE_NAMES",
    "LOSSLESS_GATES",
    "RUN_ID_RE",
    "SIM_FAULT_KEY",
    "STATE_COMPLETE",
    "STATE_INTERRUPTED",
    "STATE_RUNNING",
    "AnsibleReconfigurer",
    "BenchPlan",
    "BundleMeasure",
    "Interrupted",
    "IsolationUnavailable",
    "LocalProcessReconfigurer",
    "LosslessRestart",
    "Measure",
    "Plan",
    "PlanError",
    "PlannedConfig",
    "Reconfigurer",
    "RunDir",
    "SweepOptions",
    "SweepRunner",
    "Target",
    "access_from_args",
    "add_inventory_arguments",
    "add_lossless_restart",
    "build_report",
    "coding_sandbox",
    "controller_fingerprint",
    "decide",
    "default_run_id",
    "expand_grid",
    "format_duration",
    "latest_resumable",
    "load_target",
    "load_targets",
    "local_reconfigurer",
    "make_plan",
    "now_iso",
    "parse_extra_vars",
    "print_gates",
    "print_resume",
    "refuse_unisolated",
    "reload_target",
    "restarts_of",
    "resume_command",
    "resume_mode",
    "source_args",
    "target_from_args",
    "validate_all",
    "validate_config",
]
