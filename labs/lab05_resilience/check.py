"""Lab 5 checks: layered resilience (``testbed check 5 RESULTS``), on a results folder of
``labs/lab05_resilience/*/scenario.yaml``: one variant per fault, each graded from the
fault analysis the run wrote (``runs[i].faults``: detection, repair, lost probes,
chains failed). The variants have neutral names (``f1`` ... ``f4``): a check finds its
fault by kind in whichever variant ran it, and the student's diagnosis
(``predictions.yaml``: the layer that repairs each, and the figure that shows it) is
graded against the same records.
"""

from __future__ import annotations

import re

from testbed.lab.live import wait_until
from testbed.reports.grading import Missing, Results, Verdict, verdict
from testbed.reports.live_checks import NotApplicable, hosts_reach_across_leaves
from testbed.reports.predictions import Diagnosis, Number

CUT_REPAIR_MS = 100.0


def _where(r: Results, kind: str) -> tuple[str, dict]:
    """The variant that ran a ``kind`` fault, and the fault's record."""
    for run in r.runs():
        for f in run.get("faults") or ():
            if f.get("fault") == kind:
                if not f.get("ok"):
                    raise Missing(f"variant {run.get('name')}: the {kind} fault was not "
                                  f"applied ({f.get('error')})")
                return run.get("name", "?"), f
    raise Missing(f"no variant ran a {kind} fault in summary.json")


def _fault(r: Results, kind: str) -> dict:
    return _where(r, kind)[1]


def _ms(v: float | None) -> str:
    return "never" if v is None else f"{v:.0f} ms"


def link_cut_repaired(r: Results) -> Verdict:
    """Student task: a cut spine link is repaired within 100 ms, no chain fails."""
    f = _fault(r, "link_down")
    failed_chains, repair = f.get("chains_failed", 0), f.get("repair_ms")
    ok = repair is not None and repair <= CUT_REPAIR_MS and failed_chains == 0
    return verdict(ok, f"repaired after {_ms(repair)} (limit {CUT_REPAIR_MS:.0f} ms), "
                       f"{f.get('lost_packets')} probes lost, {failed_chains} chains failed"
                       + ("" if ok else "; which layer repairs a dead port?"))


def lossy_link_drained(r: Results) -> Verdict:
    """Student task: a 20 % lossy link (carrier up) is found and drained, no chain fails."""
    f = _fault(r, "degrade")
    failed_chains, repair = f.get("chains_failed", 0), f.get("repair_ms")
    ok = repair is not None and failed_chains == 0
    return verdict(ok, f"drained after {_ms(repair)} (detected by "
                       f"{f.get('detected_by') or 'nothing'}), {failed_chains} chains failed"
                   + ("" if ok else "; carrier and port status cannot see loss"))


def plane_loss_survived(r: Results) -> Verdict:
    """Student task: a whole plane fails and no chain fails (hosts move to the other)."""
    variant, f = _where(r, "plane_fail")
    failed_chains = f.get("chains_failed", 0)
    training = r.value(variant, "training.iterations")
    return verdict(failed_chains == 0,
                   f"{failed_chains} chains failed of {f.get('chains_inflight')} in flight, "
                   f"detected after {_ms(f.get('detect_ms'))} by "
                   f"{f.get('detected_by') or 'nothing'}; training {training} iterations")


def controller_crash_lossless(r: Results) -> Verdict:
    """The lesson: killing the controller loses no probe (rules are proactive)."""
    kill = _fault(r, "controller_kill")
    back = _fault(r, "controller_restart")
    lost = kill.get("lost_packets", 0) + back.get("lost_packets", 0)
    return verdict(lost == 0, f"{lost} probes lost while the controller was down and when it "
                              f"came back; {kill.get('chains_failed', 0)} chains failed")


CHECKS = [link_cut_repaired, lossy_link_drained, plane_loss_survived,
          controller_crash_lossless]


# -- the diagnosis and the predictions (predictions.yaml) -------------------------------
#: the layers a student chooses from, and the scenario keys that switch each on
LAYERS = {"switch": "controller.fast_failover", "controller": "controller.recompute",
          "probes": "controller.health", "host": "agents.multipath, training.multipath",
          "none": "nothing to switch on"}
#: the layers that repair each kind of fault (a cut: either the switch or the controller
#: repairs it within 100 ms)
REPAIRED_BY = {"link_down": ("switch", "controller"), "degrade": ("probes",),
               "plane_fail": ("host",), "controller_kill": ("none",)}
#: the fields of a fault's record (repair off) that tell its kind apart, one of which the
#: student cites with its value
TELLING = {
    "link_down": ("unrepaired_streams", "lost_packets", "chains_failed", "repair_ms"),
    "degrade": ("detected_by", "unrepaired_streams", "lost_packets", "chains_delayed",
                "added_p99_ms", "repair_ms"),
    "plane_fail": ("detected_by", "errors", "chains_failed", "training_timeouts",
                   "training_lost_packets"),
    "controller_kill": ("lost_packets", "chains_failed", "chains_delayed"),
}


def first_fault(r: Results, variant: str) -> dict:
    """A variant's fault (the first of its faults: the one its undo follows)."""
    faults = r.run(variant).get("faults") or []
    if not faults:
        raise Missing(f"variant {variant}: no fault in summary.json")
    if not faults[0].get("ok"):
        raise Missing(f"variant {variant}: its fault was not applied "
                      f"({faults[0].get('error')})")
    return faults[0]


def _diagnosis(n: int) -> Diagnosis:
    return Diagnosis(f"d{n}", f"f{n}", first_fault, tuple(LAYERS), REPAIRED_BY, TELLING)


def _dead_streams(r: Results) -> float:
    return _fault(r, "link_down")["unrepaired_streams"]


def _crash_lost(r: Results) -> float:
    return _fault(r, "controller_kill").get("lost_packets", 0) + \
        _fault(r, "controller_restart").get("lost_packets", 0)


#: graded against the starter's run (every repair off): the diagnosis of the four
#: faults, and predictions 1 (probe streams that die for good, exactly) and 4 (probes
#: lost while the controller is down, within 10)
PREDICTIONS = [
    Number("1", _dead_streams, unit="streams of 8", within_abs=0),
    Number("4", _crash_lost, unit="probes", within_abs=10),
    *(_diagnosis(n) for n in (1, 2, 3, 4)),
]


# -- live checks: ``testbed check 5 --lab NAME`` on a running lab (testbed up) ----------
#: the scenario the starter and the solution build (a lab of another is refused)
SCENARIO = "lab05-resilience"
#: the spine link the live check cuts when the variant's own faults cut none
CUT = "p0l0-p0s1"
#: seconds the cut is given to be repaired (the 100 ms target is the run's to measure:
#: a round of probes takes about a second here)
CUT_WAIT_S = 10.0
#: seconds the lab is given to heal after the cut is undone
HEAL_WAIT_S = 30.0
_WATCH = re.compile(r"watch_port:(\d+)")


def failover_groups_on_spines(live) -> Verdict:
    """The switch layer, when the variant switches it on (controller.fast_failover):
    every spine holds a fast-failover group for each of its downlinks, the downlink
    first (watched) and a way back out as its backup."""
    if not live.variant.controller.get("fast_failover"):
        raise NotApplicable(f"variant {live.variant_name} does not switch on fast "
                            "failover (controller.fast_failover)")
    spec, bad, count = live.spec, [], 0
    for spine in (s for s in spec.switches if s.role == "spine"):
        # each fast-failover group's primary port (its first bucket's watch_port), when
        # the group has a backup bucket
        primary = {int(m.group(1)) for g in live.groups(live.short(spine.name))
                   if "type=ff" in g and g.count("bucket=") >= 2
                   and (m := _WATCH.search(g))}
        downlinks = [p.port for p in spec.switch_ports()
                     if p.switch == spine.name and p.role.endswith("_downlink")]
        missing = [p for p in downlinks if p not in primary]
        count += len(downlinks) - len(missing)
        if missing:
            bad.append(f"{live.short(spine.name)}: no fast-failover group for port(s) "
                       f"{', '.join(map(str, missing))}")
    return verdict(not bad, "; ".join(bad) or f"{count} spine downlinks each behind a "
                                              "fast-failover group with a backup")


def _cut_target(live) -> str:
    """The variant's own spine link cut (its link_down fault), else :data:`CUT`."""
    for fault in live.variant.faults:
        if fault.action == "link_down" and fault.target:
            return fault.target
    return CUT


def cut_link_repaired(live) -> Verdict:
    """Student task, on the running lab: a spine link is cut (testbed fault link_down)
    and every pair of hosts across leaves answers again within 10 s; the link is then
    restored."""
    before, probed = live.unreachable_across_leaves()
    if before:
        return verdict(False, f"before the cut, {len(before)} of {probed} pairs gave no "
                              f"answer ({', '.join(before[:4])})")
    link = _cut_target(live)
    last: list[list[str]] = [[]]

    def repaired() -> bool:
        last[0] = live.unreachable_across_leaves()[0]
        return not last[0]

    live.fault("link_down", link)
    try:
        took = wait_until(repaired, CUT_WAIT_S, step=0.2)
    finally:
        live.fault("link_up", link)
        healed = wait_until(lambda: not live.unreachable_across_leaves()[0], HEAL_WAIT_S)
    after = "" if healed is not None else (f"; {HEAL_WAIT_S:.0f} s after link_up some "
                                           "pairs still gave no answer")
    if took is None:
        return verdict(False, f"{link} cut: {len(last[0])} of {probed} pairs still gave no "
                              f"answer after {CUT_WAIT_S:.0f} s ({', '.join(last[0][:4])}): "
                              f"which layer repairs a dead port?{after}")
    return verdict(True, f"{link} cut: all {probed} pairs across leaves answered "
                         f"{took:.1f} s after the cut (probe rounds; the run's repair_ms "
                         f"measures the 100 ms target); link restored{after}")


LIVE = [hosts_reach_across_leaves, failover_groups_on_spines, cut_link_repaired]
