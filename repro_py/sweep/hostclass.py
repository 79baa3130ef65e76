"""Each fleet host's hardware class, read by ``playbooks/host_class.yml``: a fleet compares configs only within one.

A class is what makes two hosts' measurements comparable: the GPU model and count, the driver version, the CUDA
toolkit's release (nvcc), the sglang version in the service venv and the patch series applied to it (its digest).
:func:`probe_hosts` runs the play once over all the hosts (through
:meth:`repro_py.sweep.reconfigure.AnsibleReconfigurer.run_play`, Ansible's forks running them side by side; no
lease: the play only reads) and returns a :class:`HostProbe` for every host asked for: its class, or why it is
left out (unreachable, a read that failed, a patch series missing or other than this bundle's).
:func:`classes` groups the usable hosts by :meth:`HostClass.key`.

The series digest is the ``sglang_patches`` role's own (``series_sha256`` in
``plugins/module_utils/sglang_patch_files.py``, loaded here through :mod:`repro_py.sweep.hostcode`):
sha256 over each patch's name and sha256, in series order, as the role records it in its state file on the host;
``""`` for an empty series (stock sglang).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from repro_py.ansibleaccess import AnsibleAccess
from repro_py.endpoint import Endpoint
from repro_py.sweep import hostcode
from repro_py.sweep.inventory import Target
from repro_py.sweep.reconfigure import AnsibleReconfigurer, failed_task_messages, read_events

PLAYBOOK = "host_class.yml"
#: The key of the play's last task's fact (``runner_on_ok`` -> ``res.ansible_facts``).
FACT = "host_class"
#: A version as the key writes it: what drivers, nvcc releases and Python packages use.
_VERSION = re.compile(r"^[0-9A-Za-z][0-9A-Za-z.+_-]*$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
#: What Ansible's --limit reads as a pattern, not as a host name.
_PATTERN_CHARS = frozenset(",:!&*?[]~ \t\n")
_MSG_LIMIT = 300


@dataclasses.dataclass(frozen=True)
class HostClass:
    """What makes a host's measurements comparable with another's (all fields required; ``series`` may be "")."""

    gpu_model: str  # e.g. "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    gpu_count: int
    driver: str  # e.g. "580.95.05"
    toolkit: str  # nvcc release, e.g. "13.0"
    sglang: str  # e.g. "0.5.23"
    series: str  # the applied series' digest (hex), "" for stock sglang

    def __post_init__(self) -> None:
        _check(self)

    def key(self) -> str:
        """A stable, filename-safe, readable id: ``8x-<model>-drv<driver>-cuda<toolkit>-sglang<version>-s<digest
        12>`` (``-stock`` for an unpatched sglang). The model is lower-cased with every run of other characters than
        letters and digits made one ``-``; two models that differ only there share a key."""
        model = re.sub(r"[^a-z0-9]+", "-", self.gpu_model.lower()).strip("-")
        series = f"s{self.series[:12]}" if self.series else "stock"
        versions = f"drv{self.driver}-cuda{self.toolkit}-sglang{self.sglang}"
        return re.sub(r"[^A-Za-z0-9._-]", "-", f"{self.gpu_count}x-{model}-{versions}-{series}")

    def as_dict(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, doc: Mapping[str, object]) -> HostClass:
        """The class in ``doc`` (:meth:`as_dict`'s shape; further keys are ignored, as the play's ``host`` and
        ``problems``). Raises :class:`ValueError` naming the field that is missing or bad and what it may be."""
        if not isinstance(doc, Mapping):
            raise ValueError(f"host class: {type(doc).__name__} is not a mapping of {', '.join(_FIELDS)}")
        missing = [name for name in _FIELDS if name not in doc]
        if missing:
            raise ValueError(f"host class: {', '.join(missing)} missing (needed: {', '.join(_FIELDS)})")
        count = doc["gpu_count"]
        if isinstance(count, str) and count.strip().isdigit():
            count = int(count)
        if isinstance(count, bool) or not isinstance(count, int):
            raise ValueError(f"host class: gpu_count={count!r} is not a GPU count (an integer >= 1)")
        for name in ("gpu_model", "driver", "toolkit", "sglang", "series"):
            if not isinstance(doc[name], str):
                raise ValueError(f"host class: {name}={doc[name]!r} is not a string")
        return cls(
            gpu_model=str(doc["gpu_model"]).strip(),
            gpu_count=count,
            driver=str(doc["driver"]).strip(),
            toolkit=str(doc["toolkit"]).strip(),
            sglang=str(doc["sglang"]).strip(),
            series=str(doc["series"]).strip().lower(),
        )


_FIELDS = tuple(field.name for field in dataclasses.fields(HostClass))


def _check(hc: HostClass) -> None:
    """Refuse a class that cannot be compared (raises :class:`ValueError` naming the field and what it may be)."""
    if not hc.gpu_model.strip() or any(ord(c) < 32 for c in hc.gpu_model):
        raise ValueError(f"host class: gpu_model={hc.gpu_model!r} must be a GPU model name (not empty, one line)")
    if isinstance(hc.gpu_count, bool) or not isinstance(hc.gpu_count, int) or hc.gpu_count < 1:
        raise ValueError(f"host class: gpu_count={hc.gpu_count!r} is not a GPU count (an integer >= 1)")
    for name, what in (("driver", "580.95.05"), ("toolkit", "13.0"), ("sglang", "0.5.23")):
        value = getattr(hc, name)
        if not isinstance(value, str) or not _VERSION.match(value):
            raise ValueError(
                f"host class: {name}={value!r} is not a version (letters, digits and . + _ -, e.g. {what})"
            )
    if not isinstance(hc.series, str) or not (hc.series == "" or _DIGEST.match(hc.series)):
        raise ValueError(f"host class: series={hc.series!r} must be a sha256 digest (64 hex digits) or '' (stock)")


@dataclasses.dataclass(frozen=True)
class HostProbe:
    """One host as the fleet sees it: its class (None when it could not be read), and why it is left out."""

    host: str
    host_class: HostClass | None  # None when the host could not be read
    problem: str | None  # None when usable; else why it is excluded, naming the host and the value

    @property
    def usable(self) -> bool:
        return self.problem is None and self.host_class is not None


# ---------------------------------------------------------------- the series digest


def series_names(series_file: Path) -> list[str]:
    """The patch names a series file lists, as the role reads them (``#`` comments, blank lines, a ``-p1``)."""
    names = []
    for line in series_file.read_text(encoding="utf-8").splitlines():
        name = re.sub(r"\s+-p1$", "", line.split("#", 1)[0].strip())
        if name:
            names.append(name)
    return names


def series_digest(series_dir: Path) -> str:
    """The digest of the series in ``series_dir`` (``series`` + the patches it lists): the role's ``series_sha256``
    over each patch's name and the sha256 of its text as the role sends it (the final newline added when missing);
    ``""`` for an empty series. Raises :class:`ValueError` naming a missing series file or patch."""
    series = series_dir / "series"
    if not series.is_file():
        raise ValueError(f"no series file at {series} (patches/sglang/<version>/series)")
    patches = []
    for name in series_names(series):
        path = series_dir / name
        if not path.is_file():
            raise ValueError(f"{series} lists {name}, which is not a file in {series_dir}")
        text = path.read_bytes().decode("utf-8")
        if text and not text.endswith("\n"):
            text += "\n"  # what the role's module does with lookup('file')'s text
        patches.append({"name": name, "sha256": hashlib.sha256(text.encode()).hexdigest()})
    return digest_of(patches)


def digest_of(patches: Sequence[Mapping[str, str]]) -> str:
    """The role's ``series_sha256`` of ``[{name, sha256}, ...]`` in order; ``""`` for no patch."""
    if not patches:
        return ""
    files = hostcode.load("sglang_patch_files")
    return str(files.series_sha256([{"name": p["name"], "sha256": p["sha256"]} for p in patches]))


# ---------------------------------------------------------------- reading the play's events


#: What Ansible puts before ssh's own words on a connection error (2.19: "Task failed: "), left out of a problem.
_NOISE = re.compile(
    r"^(Task failed: )?(Failed to connect to the host via ssh: |"
    r'Data could not be sent to remote host "[^"]*"\. Make sure this host can be reached over ssh: )?'
)


def _first_line(msg: object) -> str:
    lines = [ln.strip() for ln in str(msg or "").splitlines() if ln.strip()]
    text = _NOISE.sub("", lines[0]) if lines else "(no message)"
    return text if len(text) <= _MSG_LIMIT else text[: _MSG_LIMIT - 3] + "..."


def host_class_docs(events: Iterable[Mapping[str, Any]]) -> dict[str, Mapping[str, Any]]:
    """host -> the ``host_class`` mapping its last task reported (``runner_on_ok`` events)."""
    out: dict[str, Mapping[str, Any]] = {}
    for event in events:
        if event.get("event") != "runner_on_ok":
            continue
        data: Mapping[str, Any] = event.get("event_data") or {}
        facts = (data.get("res") or {}).get("ansible_facts") or {}
        doc = facts.get(FACT) if isinstance(facts, Mapping) else None
        if isinstance(doc, Mapping) and data.get("host"):
            out[str(data["host"])] = doc
    return out


def _series_dir(doc: Mapping[str, Any], bundle: Path | None = None) -> str:
    """The controller directory of the series the play compared with (normalized), as the play reports it; with
    ``bundle``, this bundle's ``patches/sglang/<version>`` when the play did not say."""
    where = str(doc.get("series_dir") or "")
    if not where and bundle is not None and doc.get("series_version"):
        where = str(bundle / "patches" / "sglang" / str(doc["series_version"]))
    return os.path.normpath(where) if where else ""


def probe_of(host: str, doc: Mapping[str, Any], expected: Mapping[str, str]) -> HostProbe:
    """One host's probe from its ``host_class`` mapping; ``expected``: series directory -> its digest as
    :func:`series_digest` computes it on the controller (a directory missing there is not cross-checked)."""
    problems = [str(p) for p in doc.get("problems") or [] if str(p).strip()]
    where = _series_dir(doc)
    mine, theirs = expected.get(where), str(doc.get("series_expected") or "")
    if mine is not None and mine != theirs:
        problems.append(
            f"this bundle's series {where} digest is {mine or 'empty'} on the controller but "
            f"{theirs or 'empty'} in the play (the two computations disagree)"
        )
    host_class: HostClass | None = None
    try:
        host_class = HostClass.from_dict(doc)
    except ValueError as exc:
        if not problems:  # the play's own problems say why a value is empty; this adds nothing to them
            problems.append(str(exc))
    return HostProbe(host=host, host_class=host_class, problem=f"{host}: " + "; ".join(problems) if problems else None)


def probes_from_events(
    hosts: Sequence[str], events: Sequence[Mapping[str, Any]], *, expected: Mapping[str, str], ended: str
) -> dict[str, HostProbe]:
    """A probe for every host of ``hosts`` from one run's events (pure: unit-tested). ``ended``: how the run
    ended (``status=... rc=...``), for a host the events say nothing about."""
    docs = host_class_docs(events)
    failures: dict[str, dict[str, str]] = {}
    for failure in failed_task_messages(events):
        failures.setdefault(failure["host"], failure)  # the first: the cause
    out: dict[str, HostProbe] = {}
    for host in hosts:
        if host in docs:
            out[host] = probe_of(host, docs[host], expected)
            continue
        item = failures.get(host)
        if item is None:
            problem = f"{host}: no host class read (not in the inventory, or the play stopped before it: {ended})"
        elif item["unreachable"]:
            problem = f"{host}: unreachable ({_first_line(item['msg'])})"
        else:
            problem = f"{host}: task '{item['task']}' failed: {_first_line(item['msg'])}"
        out[host] = HostProbe(host=host, host_class=None, problem=problem)
    return out


# ---------------------------------------------------------------- running the play


def _check_hosts(hosts: Sequence[str]) -> list[str]:
    names = list(dict.fromkeys(hosts))
    if not names:
        raise ValueError("probe_hosts: no host given (name at least one inventory host)")
    for name in names:
        if not name or _PATTERN_CHARS & set(name):
            raise ValueError(
                f"probe_hosts: host {name!r} is not an inventory host name (Ansible would read "
                f"{''.join(sorted(_PATTERN_CHARS & set(name))).strip() or 'it'} as a pattern)"
            )
    return names


def _expected_digests(bundle: Path, docs: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """series directory -> :func:`series_digest` of it, for each directory the hosts' plays compared with."""
    out: dict[str, str] = {}
    for doc in docs:
        where = _series_dir(doc, bundle)
        if where and where not in out and (Path(where) / "series").is_file():
            out[where] = series_digest(Path(where))
    return out


def probe_hosts(
    bundle: Path,
    target_inventories: Sequence[Path],
    hosts: Sequence[str],
    *,
    access: AnsibleAccess,
    private_dir: Path,
    extra_vars: Mapping[str, object] | None = None,
) -> dict[str, HostProbe]:
    """Run ``playbooks/host_class.yml`` once over ``hosts`` (``--limit`` the hosts; the inventories layered in
    order, as ``ansible-playbook -i A -i B``) and return a probe for every host, an unreachable one included."""
    names = _check_hosts(hosts)
    if not target_inventories:
        raise ValueError("probe_hosts: no inventory given (target_inventories names at least one source)")
    bundle = bundle.resolve()
    inventories = [Path(p) for p in target_inventories]
    # run_play reads only the target's inventories and access; the host and endpoint are not used by this play
    target = Target(
        inventory=inventories[0], host=names[0], hostvars={}, endpoint=Endpoint("http://127.0.0.1"),
        engine_kind="real", layers=tuple(inventories[1:]), access=access,
    )  # fmt: skip
    runner = AnsibleReconfigurer(bundle, target, limit=",".join(names))
    result = runner.run_play(bundle / "playbooks" / PLAYBOOK, private_dir.resolve(), dict(extra_vars or {}))
    events = read_events(Path(result.config.artifact_dir))
    expected = _expected_digests(bundle, host_class_docs(events).values())
    return probes_from_events(names, events, expected=expected, ended=f"status={result.status} rc={result.rc}")


def classes(probes: Mapping[str, HostProbe]) -> dict[str, list[str]]:
    """class key -> the usable hosts of that class, sorted (keys sorted too); unusable hosts are left out."""
    out: dict[str, list[str]] = {}
    for probe in probes.values():
        if probe.usable and probe.host_class is not None:
            out.setdefault(probe.host_class.key(), []).append(probe.host)
    return {key: sorted(out[key]) for key in sorted(out)}
