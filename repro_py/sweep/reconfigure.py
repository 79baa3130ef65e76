"""Restart the engine with one config: the interface and its Ansible implementation.

:class:`AnsibleReconfigurer` runs ``playbooks/reconfigure.yml`` through
ansible-runner with the config as extra vars, one private data dir per run
(``results/<run>/runner/<label>/``, artifacts and job events kept), and
reads the play's deploy report from ansible-runner's own artifacts: the role
publishes it with ``set_stats`` (``sglang_service_reports``), which lands in
the ``playbook_on_stats`` event's ``artifact_data``; the report JSON file
(``sglang_service_report_path``) serves only when the stats are absent. On failure
the reason is the report's own ``failure.reason`` and the failed task's
message from the runner events; the journal excerpt comes from the report.

Tests and benchmarks inject another :class:`Reconfigurer` (for example
:class:`repro_py.sweep.localproc.LocalProcessReconfigurer`, which runs the
simulated engine as a local subprocess).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Protocol

from repro_py.ansibleaccess import AnsibleAccess, runner_env
from repro_py.results.failures import FAILED_TO_START, INVALID_CONFIG
from repro_py.sweep.extravars import DETERMINISTIC_VAR
from repro_py.sweep.grid import PlannedConfig
from repro_py.sweep.inventory import Target

#: Task actions whose failure means the config itself was refused.
_VALIDATION_ACTIONS = ("ddtree_validate", "validate_argument_spec", "validate_spec", "spec_config")
_JOURNAL_LINES = 40


@dataclasses.dataclass
class ReconfigureOutcome:
    """What one restart with one config came to."""

    ok: bool
    status: str  # ready | failed | rolled_back | canceled | error
    wall_s: float
    failure_class: str | None = None
    reason: str | None = None
    journal: list[str] = dataclasses.field(default_factory=list)
    time_to_ready_s: float | None = None
    invocation_id: str | None = None
    main_pid: int | None = None
    changed: bool = False
    unit_sha256: str | None = None
    server_info_echo: Mapping[str, Any] | None = None
    artifacts: str | None = None

    def as_result(self) -> dict[str, object]:
        """The ``reconfigure`` block of a per-config result."""
        return {
            "time_to_ready_s": self.time_to_ready_s,
            "invocation_id": self.invocation_id,
            "wall_s": round(self.wall_s, 3),
            "changed": self.changed,
            "status": self.status,
            "main_pid": self.main_pid,
            # what the NEW process echoed when the readiness check passed (its config as it runs)
            "server_info_echo": dict(self.server_info_echo) if self.server_info_echo is not None else None,
            "artifacts": self.artifacts,
            "unit_sha256": self.unit_sha256,
        }


class Reconfigurer(Protocol):
    """Restarts the engine with a config; blocking (the sweep calls it in a thread)."""

    def reconfigure(
        self, cfg: PlannedConfig, private_dir: Path, cancel: threading.Event, *, restore: bool = False,
        deterministic: bool = False,
    ) -> ReconfigureOutcome:
        """Stop the engine, start it with ``cfg``, wait for readiness (or failure).

        ``restore``: this is the final restore of the inventory's default config
        (the Ansible reconfigurer then leaves out the sweep's ``--extra-var`` values).
        ``deterministic``: run sglang's deterministic inference whatever the inventory says (the lossless
        gate's restart, or every restart of ``--lossless-restart shared``); otherwise the inventory's own
        ``sglang_service_deterministic_inference`` applies, as in the unit the operator deploys."""
        ...

    def journal(
        self, private_dir: Path, lines: int = _JOURNAL_LINES, invocation_id: str | None = None, grep: str | None = None
    ) -> list[str]:
        """The engine's last log lines (best effort; ``(journal unavailable: ...)`` when unreadable); with
        ``invocation_id`` only that invocation's lines (never an earlier run's); with ``grep`` (a regex) only
        the lines that match it, from the whole invocation."""
        ...

    def close(self) -> None:
        """Release what the reconfigurer holds (a local engine process, ...)."""
        ...


# ---------------------------------------------------------------- events


def failed_task_messages(events: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
    """Every fatal failure in ansible-runner events: task, action, host, message."""
    out: list[dict[str, str]] = []
    for event in events:
        kind = event.get("event")
        if kind not in {"runner_on_failed", "runner_on_unreachable", "runner_item_on_failed"}:
            continue
        data: Mapping[str, Any] = event.get("event_data") or {}
        if data.get("ignore_errors"):
            continue
        res: Mapping[str, Any] = data.get("res") or {}
        msg = res.get("msg") or res.get("reason") or res.get("stderr") or ""
        if not isinstance(msg, str):
            msg = json.dumps(msg, sort_keys=True)
        out.append(
            {
                "task": str(data.get("task") or ""),
                "action": str(data.get("resolved_action") or data.get("task_action") or ""),
                "host": str(data.get("host") or ""),
                "msg": msg.strip(),
                "unreachable": "yes" if kind == "runner_on_unreachable" else "",
            }
        )
    return out


def _first_line(msg: str, limit: int = 400) -> str:
    """The first non-empty line of a task message, with the lines it introduces when it ends in ':'
    (a list of problems); a journal quoted in the message travels separately."""
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    if not lines:
        return ""
    text = lines[0]
    for extra in lines[1:4]:
        if not text.endswith(":") and not text.endswith(";"):
            break
        text += " " + extra
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _lines(value: object) -> list[str]:
    if isinstance(value, list):
        return [str(v) for v in value]
    if isinstance(value, str):
        return value.splitlines()
    return []


def read_events(artifact_dir: Path) -> list[dict[str, Any]]:
    """Job events written by ansible-runner (``artifacts/<ident>/job_events/*.json``)."""
    events: list[tuple[int, dict[str, Any]]] = []
    for path in artifact_dir.glob("job_events/*.json"):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(doc, dict):
            events.append((int(doc.get("counter") or 0), doc))
    return [doc for _, doc in sorted(events, key=lambda item: item[0])]


#: The set_stats key under which the role publishes its deploy report (one entry per host).
REPORTS_STAT = "sglang_service_reports"


def report_from_stats(events: Iterable[Mapping[str, Any]], host: str) -> dict[str, Any] | None:
    """``host``'s deploy report from the play's stats (``playbook_on_stats`` -> ``artifact_data``), if any."""
    for event in events:
        if event.get("event") != "playbook_on_stats":
            continue
        artifact: Mapping[str, Any] = (event.get("event_data") or {}).get("artifact_data") or {}
        reports = artifact.get(REPORTS_STAT)
        report = reports.get(host) if isinstance(reports, Mapping) else None
        if isinstance(report, dict):
            return report
    return None


def _report_file(path: Path) -> dict[str, Any] | None:
    if not path.is_file():
        return None
    try:
        loaded = json.loads(path.read_text(encoding="utf-8"))
    except ValueError:
        return None
    return loaded if isinstance(loaded, dict) else None


def outcome_from_run(
    *,
    runner_status: str,
    rc: int | None,
    report: Mapping[str, Any] | None,
    events: list[dict[str, Any]],
    wall_s: float,
    artifacts: str | None,
) -> ReconfigureOutcome:
    """Interpret one ansible-runner run of reconfigure.yml (pure: unit-tested)."""
    failures = failed_task_messages(events)
    report = report or {}
    status = str(report.get("status") or "")
    common: dict[str, Any] = {
        "wall_s": wall_s,
        "time_to_ready_s": report.get("time_to_ready_s"),
        "invocation_id": report.get("invocation_id"),
        "main_pid": report.get("main_pid"),
        "changed": bool(report.get("changed", False)),
        # the unit that ran this config; after a rollback the installed one is another config's
        "unit_sha256": report.get("config_unit_sha256") or report.get("unit_sha256"),
        "server_info_echo": report.get("server_info_echo"),
        "artifacts": artifacts,
    }
    if runner_status == "canceled":
        return ReconfigureOutcome(ok=False, status="canceled", reason="interrupted (Ctrl-C)", **common)
    if status == "ready" and rc == 0:
        return ReconfigureOutcome(ok=True, status="ready", **common)
    failure: Mapping[str, Any] = report.get("failure") or {}
    reasons: list[str] = []
    if failure.get("reason"):
        reasons.append(str(failure["reason"]))
    # the first fatal task is the cause; a later one (a rescue's own fail) adds only what it says anew
    picked = failures[:1] + failures[-1:] if len(failures) > 1 else failures
    named: list[str] = []
    for item in picked:
        line = _first_line(item["msg"])
        where = f"task '{item['task']}'" + (f" on {item['host']}" if item["host"] else "")
        if line and any(line in r or r in line for r in reasons):
            named.append(where)
            continue
        reasons.append(where + (" unreachable: " if item["unreachable"] else " failed: ") + (line or "(no message)"))
    if named and reasons:
        reasons[0] += f" [{named[0]}]"
    if not reasons:
        if not report:
            reasons.append(f"the play ended with status={runner_status} rc={rc} and wrote no report")
        elif status == "ready":
            reasons.append(f"report says ready but ansible-playbook exited rc={rc}")
        else:
            reasons.append(f"report status={status or 'missing'} without a failure reason (rc={rc})")
    journal = _lines(failure.get("journal"))
    invalid = any(any(a in item["action"] for a in _VALIDATION_ACTIONS) for item in failures)
    return ReconfigureOutcome(
        ok=False,
        status=status or "error",
        failure_class=INVALID_CONFIG if invalid else FAILED_TO_START,
        reason="; ".join(reasons),
        journal=journal,
        **common,
    )


# ---------------------------------------------------------------- ansible


def journal_command(unit: str, lines: int, invocation_id: str | None, grep: str | None = None) -> str:
    """journalctl for one invocation (the engine's lines and systemd's about it), else the unit's last lines;
    ``grep``: only the lines matching that pattern (journalctl --grep, PCRE2, filtered on the host)."""
    base = f"journalctl -n {int(lines)} --no-pager -o short-iso"
    if grep is not None:
        base += f" --grep {shlex.quote(grep)}"
    if invocation_id and all(c.isalnum() for c in invocation_id):
        return f"{base} _SYSTEMD_INVOCATION_ID={invocation_id} + INVOCATION_ID={invocation_id}"
    return f"{base} -u {unit}"


def _unit_name(target: Target) -> str:
    value = target.var("sglang_service_name")
    if isinstance(value, str) and value:
        return value if value.endswith(".service") else value + ".service"
    return "sglang.service"


def journal_access(access: AnsibleAccess) -> dict[str, Any]:
    """The ad-hoc journal read's runner options: ``--become`` and the vault/become options."""
    kwargs = access.runner_kwargs()
    kwargs["cmdline"] = " ".join(filter(None, ("--become", kwargs.get("cmdline", ""))))
    return kwargs


class AnsibleReconfigurer:
    """Runs ``playbooks/reconfigure.yml`` through ansible-runner, one private data dir per run."""

    def __init__(
        self,
        bundle: Path,
        target: Target,
        *,
        limit: str | None = None,
        verbosity: int = 0,
        extra_vars: Mapping[str, object] | None = None,
    ) -> None:
        self.extra_vars = dict(extra_vars or {})
        self.bundle = bundle.resolve()
        self.target = target
        self.limit = limit or target.host
        self.verbosity = verbosity
        self.playbook = self.bundle / "playbooks" / "reconfigure.yml"
        #: The sweep's host lease (its id and holder): every play, the restore included, runs under it.
        self.lease_vars: dict[str, object] = {}

    def available(self) -> bool:
        return self.playbook.is_file()

    def _env(self) -> dict[str, str]:
        return runner_env(self.bundle)

    def _inventories(self) -> list[str]:
        return [str(p.resolve()) for p in self.target.inventories]

    def run_play(
        self, playbook: Path, private_dir: Path, extravars: Mapping[str, object], cancel: threading.Event | None = None
    ) -> Any:
        """One ansible-runner run of ``playbook`` on the target (the sweep's lease vars added); its result."""
        import ansible_runner  # noqa: PLC0415 (heavy; only when really used)

        private_dir.mkdir(parents=True, exist_ok=True)
        return ansible_runner.run(
            private_data_dir=str(private_dir),
            project_dir=str(self.bundle),
            playbook=str(playbook),
            inventory=self._inventories(),
            limit=self.limit,
            extravars={**extravars, **self.lease_vars},
            envvars=self._env(),
            quiet=True,
            verbosity=self.verbosity or None,
            cancel_callback=(cancel or threading.Event()).is_set,
            rotate_artifacts=0,
            **self.target.access.runner_kwargs(),
        )

    def reconfigure(
        self, cfg: PlannedConfig, private_dir: Path, cancel: threading.Event, *, restore: bool = False,
        deterministic: bool = False,
    ) -> ReconfigureOutcome:
        private_dir = private_dir.resolve()
        private_dir.mkdir(parents=True, exist_ok=True)
        report_path = private_dir / "reconfigure-report.json"
        report_path.unlink(missing_ok=True)
        extravars = {**({} if restore else self.extra_vars), **cfg.extravars()}
        if deterministic and not restore:  # the lossless gate's restart; otherwise the inventory's own value
            extravars[DETERMINISTIC_VAR] = True
        extravars["sglang_service_report_path"] = str(report_path)
        started = time.monotonic()
        result = self.run_play(self.playbook, private_dir, extravars, cancel)
        wall = time.monotonic() - started
        artifact_dir = Path(result.config.artifact_dir)
        events = read_events(artifact_dir)
        report = report_from_stats(events, self.target.host)
        if report is None:
            # No stats: ansible-runner writes the stats event only when the playbook ends, so a
            # canceled or killed play has none although its report task may have written the file
            # (and a play that failed before the report task has neither: the events then explain).
            report = _report_file(report_path)
        return outcome_from_run(
            runner_status=str(result.status),
            rc=result.rc,
            report=report,
            events=events,
            wall_s=wall,
            artifacts=os.path.relpath(artifact_dir, private_dir.parent.parent),
        )

    def journal(
        self, private_dir: Path, lines: int = _JOURNAL_LINES, invocation_id: str | None = None, grep: str | None = None
    ) -> list[str]:
        import ansible_runner  # noqa: PLC0415 (heavy; only when really used)

        private_dir = private_dir.resolve()
        private_dir.mkdir(parents=True, exist_ok=True)
        try:
            result = ansible_runner.run(
                private_data_dir=str(private_dir),
                host_pattern=self.limit,
                module="ansible.builtin.command",
                module_args=journal_command(_unit_name(self.target), lines, invocation_id, grep),
                inventory=self._inventories(),
                envvars=self._env(),
                quiet=True,
                rotate_artifacts=0,
                # the play restarts the unit with become; reading its journal needs it too
                **journal_access(self.target.access),
            )
        except Exception as exc:  # best effort: a journal we cannot read is said so
            return [f"(journal unavailable: {exc})"]
        for event in read_events(Path(result.config.artifact_dir)):
            res = (event.get("event_data") or {}).get("res") or {}
            out = _lines(res.get("stdout_lines") or res.get("stdout"))
            if grep is not None:
                out = [ln for ln in out if ln != "-- No entries --"]
            if event.get("event") == "runner_on_ok":
                return out
            if grep is not None and event.get("event") == "runner_on_failed" and res.get("rc") == 1 and not (
                out or str(res.get("stderr") or "").strip()
            ):
                return []  # journalctl --grep matched nothing (it may exit 1 then)
        return [f"(journal unavailable: journalctl ended with status={result.status} rc={result.rc})"]

    def close(self) -> None:
        return None
