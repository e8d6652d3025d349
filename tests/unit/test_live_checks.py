"""``testbed check LAB --lab NAME``: the command line (one line and exit 2 for a lab that
is not running, another lab's scenario, a lab without live checks, a results folder
given with it), the report, and each lab's live checks on a fake running lab whose
probes, flows, groups and sessions are given (the real ones: tests/integration/
test_live_checks.py)."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.errors import HostError
from testbed.lab import state
from testbed.lab.live import LiveLab
from testbed.reports import live_checks
from testbed.reports.grading import Grade, find, passed
from topologies.leafspine import build_fabric

P = "tbt0"


def cli(*args: str) -> subprocess.CompletedProcess:
    """``testbed ARGS`` in this process (its exit status, stdout and stderr)."""
    from testbed.core.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse
            code = exc.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


@pytest.fixture
def run_root(tmp_path: Path, monkeypatch):
    """Lab records under a folder of the test's own."""
    monkeypatch.setattr(state, "RUN_ROOT", tmp_path)
    monkeypatch.setattr(state, "run_dir", lambda run_id: tmp_path / run_id)
    return tmp_path


@pytest.fixture
def supervisor():
    """A process whose command line looks like a lab's supervisor (so a record it owns is
    a live lab's)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)",
                             "testbed.lab.supervisor"])
    deadline = time.monotonic() + 10
    while b"testbed.lab.supervisor" not in Path(f"/proc/{proc.pid}/cmdline").read_bytes():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    yield proc.pid
    proc.kill()
    proc.wait()


def lab_record(run_root: Path, name: str, scenario: str, pid: int, kind="fabric") -> dict:
    (run_root / "abcd").mkdir()
    record = {"name": name, "run_id": "abcd", "kind": kind, "created": 0,
              "scenario": scenario, "variant": "v", "owner": {"pid": pid}, "prefix": P,
              "hosts": {}}
    state.write(record)
    return record


# -- the command line ------------------------------------------------------------------
def one_line(done: subprocess.CompletedProcess, start: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and start in lines[0], done.stderr
    assert done.stdout == ""


def test_no_such_lab_is_one_line(run_root) -> None:
    one_line(cli("check", "3", "--lab", "nosuch"), "no lab named 'nosuch' (live labs: none)")


def test_a_dead_lab_is_one_line(run_root) -> None:
    lab_record(run_root, "gone", "lab03-hashing", pid=2**22 + 7)  # no such process
    one_line(cli("check", "3", "--lab", "gone"), "lab 'gone' is dead")


def test_another_labs_scenario_is_one_line(run_root, supervisor) -> None:
    lab_record(run_root, "bb", "lab07-backbone", supervisor, kind="backbone")
    one_line(cli("check", "3", "--lab", "bb"),
             "lab bb runs scenario 'lab07-backbone', not lab 3's 'lab03-hashing'")
    one_line(cli("check", "5", "--lab", "bb"), "not lab 5's 'lab05-resilience'")


def test_a_lab_without_live_checks_is_one_line(run_root) -> None:
    one_line(cli("check", "1", "--lab", "x"), "lab 1 (oversubscription) has no live checks "
                                              "(labs with live checks: 3, 5, 7, 10)")


def test_lab_and_results_folder_exclude_each_other(run_root, tmp_path) -> None:
    one_line(cli("check", "3", str(tmp_path), "--lab", "x"), "--lab: grades a running lab; "
                                                              "a results folder")
    one_line(cli("check", "3", "--lab", "x", "--csv", str(tmp_path / "c.csv")), "--csv")
    one_line(cli("check", "3", "--lab", "x", "--student", "ada"), "--lab: grades a running "
                                                                "lab; --student")
    one_line(cli("check", "3"), "RESULTS: name a results folder, or a running lab with "
                                "--lab NAME")
    assert not (tmp_path / "c.csv").exists()


def test_checks_name_a_labs_live_checks_and_go_with_lab_only(run_root, tmp_path) -> None:
    """``--checks`` chooses among the lab's live checks, before any lab is looked up."""
    one_line(cli("check", "7", "--lab", "nosuch", "--checks", "sessions-on-every-link,x"),
             "--checks: unknown check 'x' (this lab's live checks: "
             "every-router-routes-everywhere, sessions-on-every-link")
    one_line(cli("check", "7", "--lab", "nosuch", "--checks", ","), "--checks: names no check")
    one_line(cli("check", "7", str(tmp_path), "--checks", "sessions-on-every-link"),
             "--checks: chooses among a running lab's live checks: it goes with --lab NAME")
    # a known name passes validation: the lab is looked up next
    one_line(cli("check", "7", "--lab", "nosuch", "--checks", "sessions-on-every-link"),
             "no lab named 'nosuch'")


def test_chosen_keeps_the_labs_order() -> None:
    def a(live): ...
    def b_c(live): ...
    assert live_checks.chosen([a, b_c], "b-c, a") == [a, b_c]
    assert live_checks.chosen([a, b_c], None) == [a, b_c]


def test_every_live_lab_names_its_scenario() -> None:
    from testbed.core import scenario

    for number, file in ((3, "starter/scenario.yaml"), (5, "solution/scenario.yaml"),
                         (7, "starter/backbone.yaml"), (10, "starter/scenario.yaml")):
        lab = find(str(number))
        module = lab.module()
        assert module.LIVE and scenario.load(lab.folder / file).name == module.SCENARIO


# -- the report --------------------------------------------------------------------------
def test_a_check_that_gets_no_answer_fails_and_the_others_run() -> None:
    def times_out(live):
        raise HostError("mnexec -a 1 sh: no answer in 20 s")

    def not_here(live):
        raise live_checks.NotApplicable("variant v loads no app")

    def fine(live):
        return passed("all answered")

    graded, skipped = live_checks.run_checks([times_out, not_here, fine], None)
    assert [(n, v.ok) for n, v in graded] == [("times-out", False), ("fine", True)]
    assert "no answer in 20 s" in graded[0][1].reason
    assert skipped == [("not-here", "variant v loads no app")]
    live = SimpleNamespace(name="x", scenario="lab03-hashing", variant_name="v")
    grade = Grade(graded)
    text = live_checks.report(find("3"), live, grade, skipped)
    assert text.splitlines() == [
        "FAIL times-out: the live lab did not answer as a running lab does (HostError: "
        "mnexec -a 1 sh: no answer in 20 s)",
        "PASS fine: all answered",
        "SKIP not-here: variant v loads no app",
        "Lab 3: Static hashing, adaptive routing and spraying: live lab x "
        "(lab03-hashing/v): 1/2 checks passed, 1 not applicable to this variant"]
    assert grade.exit_status == 1


# -- lab 3 on a fake fabric ---------------------------------------------------------------
class FakeFabric(LiveLab):
    """A fabric lab whose switches hold ``flows``/``groups`` and whose probes answer
    unless the pair is in ``dead``."""

    def __init__(self, spec, controller: dict | None = None, faults=()):
        super().__init__({"name": "f", "kind": "fabric", "prefix": P, "scenario": "s",
                          "variant": "v"})
        self.spec = spec
        self.variant = SimpleNamespace(controller=controller or {}, faults=faults)
        self.flow_table: dict[str, list[str]] = {}
        self.group_table: dict[str, list[str]] = {}
        self.dead: set[str] = set()
        self.faults: list[tuple[str, str]] = []

    def flows(self, switch):
        return self.flow_table.get(switch, [])

    def groups(self, switch):
        return self.group_table.get(switch, [])

    def unreachable_across_leaves(self, hosts=None):
        pairs = [w for _, _, w in self.host_pairs_across_leaves()]
        return [w for w in pairs if w in self.dead], len(pairs)

    def fault(self, kind, target=None):
        self.faults.append((kind, target))
        return f"{kind} {target}"


def lab3_fabric(rules=None, apps=("placement:StridePlacement",)) -> FakeFabric:
    spec = build_fabric(prefix=P, nodes=16, leaves_per_plane=4, spines_per_plane=4)
    live = FakeFabric(spec, {"apps": list(apps)})
    for leaf in (s for s in spec.switches if s.role == "leaf"):
        up = ",".join(map(str, spec.uplink_ports(leaf.name)))
        live.flow_table[live.short(leaf.name)] = [
            f"cookie=0x0, duration=1s, table=0, priority=100,ip,nw_dst=10.0.0.99 "
            f"actions=bundle(symmetric_l3l4+udp,0,hrw,ofport,members:{up})"]
    dpids = {s.dpid: live.short(s.name) for s in spec.switches}
    for dpid, rows in (rules or {}).items():
        live.flow_table[dpids[dpid]] += [
            f"cookie=0x9300000000000000, duration=2s, table=0, n_packets=5, "
            f"priority=400,ip,nw_src={src},nw_dst={dst} actions=output:{port}"
            for src, dst, port in rows]
    return live


def test_lab3_placement_checks_tell_the_starter_from_the_solution() -> None:
    import labs.lab03_hashing.solution.placement as solution
    import labs.lab03_hashing.starter.placement as starter

    check = find("3").module()
    spec = build_fabric(prefix=P, nodes=16, leaves_per_plane=4, spines_per_plane=4)
    good = lab3_fabric(solution.plan(spec))
    assert check.placement_app_loaded(good).ok
    v = check.placement_avoids_collisions(good)
    assert v.ok and "16 pinned flows" in v.reason, v.reason
    bad = lab3_fabric(starter.plan(spec))
    assert check.placement_app_loaded(bad).ok
    v = check.placement_avoids_collisions(bad)
    assert not v.ok and "uplink p0l0 port" in v.reason, v.reason
    # the app's flows deleted by hand from one leaf
    good.flow_table["p0l1"] = good.flow_table["p0l1"][:1]
    v = check.placement_app_loaded(good)
    assert not v.ok and "none on p0l1" in v.reason
    with pytest.raises(live_checks.NotApplicable, match="loads no controller app"):
        check.placement_avoids_collisions(lab3_fabric(apps=()))


def test_lab3_leaves_must_send_over_every_spine() -> None:
    check = find("3").module()
    live = lab3_fabric()
    assert check.leaves_use_every_spine(live).ok
    live.flow_table["p0l2"] = []  # a leaf's flows deleted by hand
    v = check.leaves_use_every_spine(live)
    assert not v.ok and v.reason.startswith("p0l2 never sends to port(s)"), v.reason
    live.dead = {"n0>n8"}
    v = live_checks.hosts_reach_across_leaves(live)
    assert not v.ok and "191 of 192 host pairs" in v.reason and "n0>n8" in v.reason


# -- lab 5 -------------------------------------------------------------------------------
def lab5_fabric(**controller) -> FakeFabric:
    spec = build_fabric(prefix=P, nodes=8, leaves_per_plane=2, spines_per_plane=2)
    return FakeFabric(spec, controller)


def test_lab5_failover_groups_on_every_spine_downlink() -> None:
    check = find("5").module()
    with pytest.raises(live_checks.NotApplicable, match="fast failover"):
        check.failover_groups_on_spines(lab5_fabric())
    live = lab5_fabric(fast_failover=True)
    for spine in ("p0s0", "p0s1"):
        live.group_table[spine] = [
            f"group_id={1000 + p},type=ff,bucket=bucket_id:0,watch_port:{p},"
            f"actions=output:{p},bucket=bucket_id:1,watch_port:{3 - p},actions=IN_PORT"
            for p in (1, 2)]
    assert check.failover_groups_on_spines(live).ok
    live.group_table["p0s1"] = live.group_table["p0s1"][:1]
    v = check.failover_groups_on_spines(live)
    assert not v.ok and v.reason == "p0s1: no fast-failover group for port(s) 2"


def test_lab5_cut_is_undone_whether_or_not_it_is_repaired(monkeypatch) -> None:
    check = find("5").module()
    monkeypatch.setattr(check, "CUT_WAIT_S", 0.3)
    monkeypatch.setattr(check, "HEAL_WAIT_S", 0.3)

    class Unrepaired(FakeFabric):
        def fault(self, kind, target=None):
            self.dead = {"n0>n4"} if kind == "link_down" else set()
            return super().fault(kind, target)

    live = Unrepaired(lab5_fabric().spec, {},
                      faults=[SimpleNamespace(action="link_down", target="p0l1-p0s0")])
    v = check.cut_link_repaired(live)
    assert not v.ok and "p0l1-p0s0 cut: 1 of 32 pairs" in v.reason, v.reason
    assert live.faults == [("link_down", "p0l1-p0s0"), ("link_up", "p0l1-p0s0")]
    repaired = lab5_fabric()
    v = check.cut_link_repaired(repaired)
    assert v.ok and "p0l0-p0s1 cut: all 32 pairs" in v.reason
    assert repaired.faults == [("link_down", "p0l0-p0s1"), ("link_up", "p0l0-p0s1")]


# -- lab 7 -------------------------------------------------------------------------------
def test_lab7_design_rule_on_the_sessions_that_are_up(monkeypatch) -> None:
    from testbed.core import scenario

    check = find("7").module()
    loaded = scenario.load(find("7").folder / "solution" / "backbone.yaml")
    bb = loaded.experiment.bb
    live = SimpleNamespace(loaded=loaded, memo={}, record={"links": {lk.name: {} for lk in
                                                                     bb.all_links}})
    every = {lk.name for lk in bb.all_links}
    monkeypatch.setattr(check, "SESSION_WAIT_S", 0.1)
    monkeypatch.setattr(check, "_links_cut", lambda live: set())
    monkeypatch.setattr(check, "_links_up", lambda live: every)
    assert check.separate_paths_in_sessions(live).ok
    assert check.sessions_on_every_link(live).ok
    down = every - {"nyc-ash-1", "nyc-ash-2"}  # nyc's two links to ash, sessions gone
    monkeypatch.setattr(check, "_links_up", lambda live: down)
    assert check.separate_paths_in_sessions(live).ok  # what this grading saw already
    live.memo.clear()  # a new grading asks the routers again
    v = check.separate_paths_in_sessions(live)
    assert not v.ok and "PoP nyc" in v.reason, v.reason
    v = check.sessions_on_every_link(live)
    assert not v.ok and v.reason == "no session on nyc-ash-1, nyc-ash-2"


def test_lab7_a_cut_link_is_not_waited_for(monkeypatch) -> None:
    """A link with an end down when the check begins cannot get its session back: the
    check asks the routers once and names it, instead of waiting for it."""
    check = find("7").module()
    links = {"nyc-ash-1": {}, "nyc-ash-2": {}, "nyc-lon-1": {}}
    ifnames = {"nyc-ash-1": "tbxl0", "nyc-ash-2": "tbxl1", "nyc-lon-1": "tbxl2"}
    links_json = {"nyc": '[{"ifname": "lo", "operstate": "UNKNOWN"}, '
                         '{"ifname": "tbxl0a", "operstate": "LOWERLAYERDOWN"}, '
                         '{"ifname": "tbxl1a", "operstate": "UP"}]',
                  "ash": '[{"ifname": "tbxl0b", "operstate": "DOWN"}, '
                         '{"ifname": "tbxl1b", "operstate": "UP"}]',
                  "lon": '[{"ifname": "tbxl2b", "operstate": "UP"}]'}
    live = SimpleNamespace(
        memo={}, record={"links": links}, routers=lambda: list(links_json),
        link_ifname=lambda link, side: ifnames[link] + side,
        run=lambda node, argv: SimpleNamespace(returncode=0, stdout=links_json[node]))
    assert check._links_cut(live) == {"nyc-ash-1"}
    asked = []
    monkeypatch.setattr(check, "SESSION_WAIT_S", 30.0)
    monkeypatch.setattr(check, "_links_up", lambda live: asked.append(1) or
                        {"nyc-ash-2", "nyc-lon-1"})
    v = check.sessions_on_every_link(live)
    assert not v.ok and v.reason == "no session on nyc-ash-1"
    assert len(asked) == 1  # every link that can come up was seen at once


def test_lab7_macsec_off_is_not_applicable() -> None:
    check = find("7").module()
    live = LiveLab({"name": "b", "kind": "backbone", "keys": None, "links": {}})
    with pytest.raises(live_checks.NotApplicable, match="MACsec is off"):
        check.macsec_counters_grow(live)


# -- lab 10 ------------------------------------------------------------------------------
def test_lab10_scores_the_acceptance_it_runs_on_the_rack() -> None:
    from testbed.acceptance.step import expected
    from testbed.core import scenario

    check = find("10").module()
    folder = find("10").folder
    spec = build_fabric(prefix=P, nodes=8, rails=2, leaves_per_plane=4, spines_per_plane=4)
    planted = [{"action": "swap_rails", "target": "n1-p0l0"},
               {"action": "degrade", "target": "p0l1-p0s2", "loss": 0.02}]
    links, nodes = expected(spec, planted)

    class Rack(LiveLab):
        def __init__(self, file, found):
            super().__init__({"name": "r", "kind": "fabric", "prefix": P, "scenario": "s",
                              "variant": "unaccepted", "acceptance": {"planted": planted}})
            self.spec, self.loaded, self.found, self.asked = spec, scenario.load(file), found, []

        def accept(self, checks, timeout):
            self.asked.append(checks)
            return self.found

    everything = {"excluded_links": sorted(links), "excluded_nodes": sorted(nodes),
                  "excluded_switches": []}
    rack = Rack(folder / "solution" / "scenario.yaml", everything)
    v = check.acceptance_finds_planted_faults(rack)
    assert v.ok and rack.asked == [["cabling", "links", "paths", "system"]], v.reason
    cabling_only = {"excluded_links": sorted(links - {"p0l1-p0s2"}),
                    "excluded_nodes": sorted(nodes), "excluded_switches": []}
    rack = Rack(folder / "starter" / "scenario.yaml", cabling_only)
    v = check.acceptance_finds_planted_faults(rack)
    assert not v.ok and "missed degrade p0l1-p0s2" in v.reason and rack.asked == [["cabling"]]
    rack.record["acceptance"] = None
    with pytest.raises(live_checks.NotApplicable, match="nothing is planted"):
        check.acceptance_finds_planted_faults(rack)


def test_a_failure_on_a_flagged_host_is_rerun_and_a_pass_stands() -> None:
    from testbed.reports.grading import failed

    flagged = {"ok": False, "reasons": ["the host had less than 10 % idle CPU"]}
    quiet = {"ok": True, "reasons": []}
    bad = [("fine", passed("x")), ("slow", failed("no answer"))]
    good = [("fine", passed("x"))]
    assert live_checks.rerun_reason(bad, quiet) is None
    assert live_checks.rerun_reason(good, flagged) is None  # load fails checks, never passes
    why = live_checks.rerun_reason(bad, flagged)
    assert why.startswith("the fidelity monitor flagged the host while the live checks ran "
                          "(the host had less than 10 % idle CPU)")
    grade = Grade(bad, why)
    live = SimpleNamespace(name="x", scenario="lab03-hashing", variant_name="v")
    lines = live_checks.report(find("3"), live, grade, []).splitlines()
    assert lines[0].startswith("RERUN: the fidelity monitor flagged")
    assert lines[1:3] == ["  (not graded) PASS fine: x", "  (not graded) FAIL slow: no answer"]
    assert lines[-1].endswith("(lab03-hashing/v): RERUN (not graded; 1/2 checks passed)")
    assert grade.exit_status == 3


def test_lab7_macsec_counters_must_grow_on_every_link_end(monkeypatch) -> None:
    check = find("7").module()
    monkeypatch.setattr(check.time, "sleep", lambda s: None)
    monkeypatch.setattr(check, "_regions_unreachable", lambda live: [])

    class Secured(LiveLab):
        def __init__(self, readings):
            super().__init__({"name": "b", "kind": "backbone", "keys": "k", "links": {}})
            self.readings = iter(readings)

        def macsec_counters(self):
            return next(self.readings)

    def end(out, ok, bad=0):
        return {"OutPktsEncrypted": out, "InPktsOK": ok, "InPktsNotValid": bad}

    before = {"nyc-ams": {"a": end(10, 10), "b": end(10, 10)}}
    grown = {"nyc-ams": {"a": end(20, 19), "b": end(19, 20)}}
    assert check.macsec_counters_grow(Secured([before, grown])).ok
    rejected = {"nyc-ams": {"a": end(20, 19), "b": end(19, 10, bad=9)}}  # b's key is wrong
    v = check.macsec_counters_grow(Secured([before, rejected]))
    assert not v.ok and v.reason == ("counters still on nyc-ams:b (+9 protected, +0 "
                                     "InPktsOK, 9 not valid)")


def test_probes_ask_a_few_nodes_at_once_and_answer_in_order() -> None:
    import threading
    import time

    from testbed.lab import live as live_module

    lock, running, peak = threading.Lock(), [0], [0]

    class Probed(LiveLab):
        def __init__(self) -> None:  # no lab behind it: probe answers by name
            pass

        def probe(self, src, ips, count=3, source=None):
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.02)
            with lock:
                running[0] -= 1
            return {ip: not ip.endswith("dead") and source in (None, f"{src}-site")
                    for ip in ips}

    asks = [(f"n{i}", [f"n{i}-ok", f"n{i}-dead"], f"n{i}-site" if i % 2 else None)
            for i in range(10)]
    answers = Probed().probes(asks)
    assert answers == [{f"n{i}-ok": True, f"n{i}-dead": False} for i in range(10)]
    assert 2 <= peak[0] <= live_module.PROBE_SOURCES  # several at once, never more
