"""The host class of a fleet host (repro_py.sweep.hostclass): its key, its dict form, the series digest, and
probes read from ansible-runner events of playbooks/host_class.yml (the shapes a real run records)."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path
from typing import Any

import pytest

from repro_py.sweep import hostclass
from repro_py.sweep.hostclass import HostClass, HostProbe, classes, probes_from_events, series_digest

BUNDLE = Path(__file__).resolve().parents[2]
DIGEST = "1a2b3c4d5e6f" + "0" * 52
CT200 = HostClass("NVIDIA RTX PRO 6000 Blackwell Server Edition", 8, "580.95.05", "13.0", "0.5.23", DIGEST)


def test_the_key_is_readable_and_filename_safe() -> None:
    assert CT200.key() == (
        "8x-nvidia-rtx-pro-6000-blackwell-server-edition-drv580.95.05-cuda13.0-sglang0.5.23-s1a2b3c4d5e6f"
    )
    stock = dataclasses.replace(CT200, gpu_model="NVIDIA B300 SXM6 AC (stand-in)", sglang="0.5.23+cu130", series="")
    assert stock.key() == "8x-nvidia-b300-sxm6-ac-stand-in-drv580.95.05-cuda13.0-sglang0.5.23-cu130-stock"
    assert re.fullmatch(r"[A-Za-z0-9._-]+", stock.key())


@pytest.mark.parametrize(
    "change",
    [{"gpu_model": "NVIDIA B300"}, {"gpu_count": 4}, {"driver": "580.126.20"}, {"toolkit": "13.1"},
     {"sglang": "0.5.24"}, {"series": "f" * 64}, {"series": ""}],
    ids=lambda c: next(iter(c)),
)  # fmt: skip
def test_every_field_is_part_of_the_key(change: dict[str, Any]) -> None:
    assert dataclasses.replace(CT200, **change).key() != CT200.key()


def test_the_dict_form_round_trips_and_ignores_the_plays_other_keys() -> None:
    assert HostClass.from_dict(CT200.as_dict()) == CT200
    doc = {**CT200.as_dict(), "host": "ct200-1", "problems": [], "gpu_count": "8", "series": DIGEST.upper()}
    assert HostClass.from_dict(doc) == CT200


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"gpu_count": 0}, "gpu_count=0"),
        ({"gpu_count": "eight"}, "gpu_count='eight'"),
        ({"gpu_count": True}, "gpu_count=True"),
        ({"gpu_model": ""}, "gpu_model=''"),
        ({"driver": ""}, "driver=''"),
        ({"toolkit": "13 0"}, "toolkit='13 0'"),
        ({"sglang": None}, "sglang=None"),
        ({"series": "abc"}, "series='abc'"),
    ],
)
def test_a_bad_field_is_refused_by_name(change: dict[str, Any], named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(named)):
        HostClass.from_dict({**CT200.as_dict(), **change})


def test_a_missing_field_is_named() -> None:
    doc = CT200.as_dict()
    del doc["toolkit"]
    with pytest.raises(ValueError, match=r"toolkit missing"):
        HostClass.from_dict(doc)
    with pytest.raises(ValueError, match=r"list is not a mapping"):
        HostClass.from_dict([])  # type: ignore[arg-type]


# ---------------------------------------------------------------- the series digest


def _by_hand(patches: list[tuple[str, bytes]]) -> str:
    digest = hashlib.sha256()
    for name, body in patches:
        digest.update(name.encode() + b"\0" + hashlib.sha256(body).hexdigest().encode() + b"\n")
    return digest.hexdigest()


def test_the_series_digest_is_the_roles_over_names_and_patch_hashes_in_order(tmp_path: Path) -> None:
    (tmp_path / "0001-a.patch").write_bytes(b"--- a\n+++ b\n")
    (tmp_path / "0002-b.patch").write_bytes(b"--- c\n+++ d")  # no final newline: the role adds one
    (tmp_path / "series").write_text("# a comment\n\n0001-a.patch\n0002-b.patch -p1  # trailing\n")
    want = _by_hand([("0001-a.patch", b"--- a\n+++ b\n"), ("0002-b.patch", b"--- c\n+++ d\n")])
    assert series_digest(tmp_path) == want
    (tmp_path / "series").write_text("0002-b.patch\n0001-a.patch\n")
    assert series_digest(tmp_path) != want  # the order counts
    (tmp_path / "series").write_text("0001-a.patch\n0002-b.patch\n")
    (tmp_path / "0001-a.patch").write_bytes(b"--- a\n+++ B\n")
    assert series_digest(tmp_path) != want  # so does a patch's text


def test_the_shipped_series_digest_matches_the_role_module(tmp_path: Path) -> None:
    """The role's module records series_sha256 of what install.yml sends it: each patch's text."""
    files = hostclass.hostcode.load("sglang_patch_files")
    series_dir = BUNDLE / "patches" / "sglang" / "0.5.23"
    names = hostclass.series_names(series_dir / "series")
    assert len(names) == 12
    patches = [{"name": n, "sha256": files.sha256_bytes((series_dir / n).read_bytes())} for n in names]
    assert series_digest(series_dir) == files.series_sha256(patches)


def test_an_empty_series_is_stock_and_a_missing_patch_is_named(tmp_path: Path) -> None:
    (tmp_path / "series").write_text("# stock sglang\n")
    assert series_digest(tmp_path) == ""
    (tmp_path / "series").write_text("0001-gone.patch\n")
    with pytest.raises(ValueError, match=r"lists 0001-gone.patch, which is not a file"):
        series_digest(tmp_path)
    with pytest.raises(ValueError, match=r"no series file at .*/nowhere/series"):
        series_digest(tmp_path / "nowhere")


# ---------------------------------------------------------------- reading the play's events


def ok_event(host: str, counter: int, **change: Any) -> dict[str, Any]:
    """The last task's runner_on_ok event, as ansible-runner writes it for set_fact."""
    doc = {
        "host": host, **CT200.as_dict(), "series_expected": DIGEST, "series_version": "0.5.23",
        "series_dir": "/bundle/roles/sglang_patches/../../patches/sglang/0.5.23",
        "series_status": "ok", "series_state_file": "/var/lib/sglang-deploy/sglang-patches.state.json",
        "problems": [], **change,
    }  # fmt: skip
    return {
        "event": "runner_on_ok", "counter": counter, "uuid": f"u{counter}",
        "event_data": {"host": host, "task": "Report the host class", "task_action": "ansible.builtin.set_fact",
                       "resolved_action": "ansible.builtin.set_fact",
                       "res": {"ansible_facts": {"host_class": doc}, "changed": False, "_ansible_no_log": False}},
    }  # fmt: skip


#: The two ways ansible-core 2.19 words a refused connection (recorded: a first connection, and one whose
#: persistent control connection died with the host).
REFUSED = (
    "Task failed: Failed to connect to the host via ssh: "
    "ssh: connect to host 127.0.0.1 port {port}: Connection refused",
    'Task failed: Data could not be sent to remote host "127.0.0.1". Make sure this host can be reached over ssh: '
    "ssh: connect to host 127.0.0.1 port {port}: Connection refused",
)


def unreachable_event(host: str, counter: int, port: int, shape: int = 0) -> dict[str, Any]:
    msg = REFUSED[shape].format(port=port)
    return {
        "event": "runner_on_unreachable", "counter": counter,
        "event_data": {"host": host, "task": "Query the GPU models and the driver version",
                       "task_action": "ansible.builtin.command",
                       "res": {"msg": msg, "unreachable": True, "changed": False}},
    }  # fmt: skip


EXPECTED = {"/bundle/patches/sglang/0.5.23": DIGEST}


def test_usable_hosts_come_back_with_their_class_and_form_one_class() -> None:
    events = [ok_event("h1", 3), ok_event("h2", 4), ok_event("h3", 5)]
    probes = probes_from_events(["h1", "h2", "h3"], events, expected=EXPECTED, ended="status=successful rc=0")
    assert probes["h2"] == HostProbe("h2", CT200, None) and probes["h2"].usable
    assert classes(probes) == {CT200.key(): ["h1", "h2", "h3"]}


@pytest.mark.parametrize("shape", range(len(REFUSED)))
def test_an_unreachable_host_is_named_with_the_connection_error_and_the_others_stay_usable(shape: int) -> None:
    events = [ok_event("h1", 3), unreachable_event("h2", 4, 31032, shape), ok_event("h3", 5)]
    probes = probes_from_events(["h3", "h2", "h1"], events, expected=EXPECTED, ended="status=failed rc=4")
    assert list(probes) == ["h3", "h2", "h1"]
    assert probes["h2"].host_class is None and not probes["h2"].usable
    assert probes["h2"].problem == "h2: unreachable (ssh: connect to host 127.0.0.1 port 31032: Connection refused)"
    assert classes(probes) == {CT200.key(): ["h1", "h3"]}


def test_a_host_without_the_series_state_file_is_flagged() -> None:
    state = "/var/lib/sglang-deploy/sglang-patches.state.json"
    missing = ok_event("b300-3", 7, series="", series_status="missing",
                       problems=[f"patch series not applied (state file {state} missing)"])  # fmt: skip
    probes = probes_from_events(["b300-3"], [missing], expected=EXPECTED, ended="status=successful rc=0")
    assert probes["b300-3"].problem == f"b300-3: patch series not applied (state file {state} missing)"
    assert probes["b300-3"].host_class is not None and not probes["b300-3"].usable
    assert classes(probes) == {}


def test_a_host_with_another_series_is_flagged_naming_both_digests() -> None:
    other = "4f2a" + "1" * 60
    why = f"patch series {other} differs from this bundle's {DIGEST} (run site.yml)"
    event = ok_event("b300-3", 7, series=other, series_status="differs", problems=[why])
    probes = probes_from_events(["b300-3", "b300-1"], [event, ok_event("b300-1", 8)], expected=EXPECTED,
                                ended="status=successful rc=0")  # fmt: skip
    assert probes["b300-3"].problem == f"b300-3: {why}"
    assert classes(probes) == {CT200.key(): ["b300-1"]}


def test_a_bundle_digest_the_play_computed_otherwise_is_a_problem() -> None:
    event = ok_event("h1", 3, series_expected="e" * 64)
    probe = probes_from_events(["h1"], [event], expected=EXPECTED, ended="status=successful rc=0")["h1"]
    assert probe.problem is not None and "the two computations disagree" in probe.problem
    assert DIGEST in probe.problem and "e" * 64 in probe.problem


def test_a_read_that_failed_on_the_host_names_it_and_excludes_the_host() -> None:
    why = "nvidia-smi --query-gpu failed (exit 2): [Errno 2] No such file or directory: b'nvidia-smi'"
    event = ok_event("h1", 3, gpu_model="", gpu_count=0, driver="", problems=[why])
    probe = probes_from_events(["h1"], [event], expected=EXPECTED, ended="status=successful rc=0")["h1"]
    assert probe == HostProbe("h1", None, f"h1: {why}")


def test_a_failed_task_and_a_host_the_events_never_name_are_problems() -> None:
    failed = {"event": "runner_on_failed", "counter": 4, "event_data": {
        "host": "h2", "task": "Read nvcc's release and sglang's version in the service venv",
        "res": {"msg": "Missing sudo password"}}}  # fmt: skip
    probes = probes_from_events(["h1", "h2", "h9"], [ok_event("h1", 3), failed], expected=EXPECTED,
                                ended="status=failed rc=2")  # fmt: skip
    assert probes["h2"].problem == "h2: task 'Read nvcc's release and sglang's version in the service venv' " \
        "failed: Missing sudo password"
    assert probes["h9"].problem == (
        "h9: no host class read (not in the inventory, or the play stopped before it: status=failed rc=2)"
    )
    assert [p.host for p in probes.values() if p.usable] == ["h1"]


def test_a_class_that_differs_in_any_field_is_a_class_of_its_own() -> None:
    events = [ok_event("a", 1), ok_event("b", 2, gpu_count=4), ok_event("c", 3, driver="580.126.20"),
              ok_event("d", 4)]  # fmt: skip
    probes = probes_from_events(["d", "c", "b", "a"], events, expected=EXPECTED, ended="status=successful rc=0")
    got = classes(probes)
    assert len(got) == 3 and got[CT200.key()] == ["a", "d"]
    assert list(got) == sorted(got)


@pytest.mark.parametrize("bad", ["", "a,b", "web*", "!h1", "h 1"])
def test_a_host_name_that_ansible_reads_as_a_pattern_is_refused(bad: str, tmp_path: Path) -> None:
    from repro_py.ansibleaccess import AnsibleAccess  # noqa: PLC0415

    with pytest.raises(ValueError, match="is not an inventory host name"):
        hostclass.probe_hosts(BUNDLE, [BUNDLE / "inventory" / "local"], ["h1", bad], access=AnsibleAccess(),
                              private_dir=tmp_path)  # fmt: skip
    with pytest.raises(ValueError, match="no host given"):
        hostclass.probe_hosts(BUNDLE, [BUNDLE / "inventory" / "local"], [], access=AnsibleAccess(),
                              private_dir=tmp_path)  # fmt: skip
