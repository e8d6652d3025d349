"""Lab 5 checks: layered resilience (``testbed check 5 RESULTS``), on a results folder of
``labs/lab05_resilience/*/scenario.yaml``: one variant per fault, each graded from the
fault analysis the run wrote (``runs[i].faults``: detection, repair, lost probes,
chains failed).
"""

from __future__ import annotations

from testbed.reports.grading import Missing, Results, Verdict, verdict

CUT_REPAIR_MS = 100.0


def _fault(r: Results, variant: str, kind: str) -> dict:
    for f in r.run(variant).get("faults") or ():
        if f.get("fault") == kind:
            if not f.get("ok"):
                raise Missing(f"variant {variant}: the {kind} fault was not applied "
                              f"({f.get('error')})")
            return f
    raise Missing(f"variant {variant}: no {kind} fault in summary.json")


def _ms(v: float | None) -> str:
    return "never" if v is None else f"{v:.0f} ms"


def link_cut_repaired(r: Results) -> Verdict:
    """Student task: a cut spine link is repaired within 100 ms, no chain fails."""
    f = _fault(r, "cut", "link_down")
    failed_chains, repair = f.get("chains_failed", 0), f.get("repair_ms")
    ok = repair is not None and repair <= CUT_REPAIR_MS and failed_chains == 0
    return verdict(ok, f"repaired after {_ms(repair)} (limit {CUT_REPAIR_MS:.0f} ms), "
                       f"{f.get('lost_packets')} probes lost, {failed_chains} chains failed"
                       + ("" if ok else "; which layer repairs a dead port?"))


def lossy_link_drained(r: Results) -> Verdict:
    """Student task: a 20 % lossy link (carrier up) is found and drained, no chain fails."""
    f = _fault(r, "degrade", "degrade")
    failed_chains, repair = f.get("chains_failed", 0), f.get("repair_ms")
    ok = repair is not None and failed_chains == 0
    return verdict(ok, f"drained after {_ms(repair)} (detected by "
                       f"{f.get('detected_by') or 'nothing'}), {failed_chains} chains failed"
                   + ("" if ok else "; carrier and port status cannot see loss"))


def plane_loss_survived(r: Results) -> Verdict:
    """Student task: a whole plane fails and no chain fails (hosts move to the other)."""
    f = _fault(r, "plane", "plane_fail")
    failed_chains = f.get("chains_failed", 0)
    training = r.value("plane", "training.iterations")
    return verdict(failed_chains == 0,
                   f"{failed_chains} chains failed of {f.get('chains_inflight')} in flight, "
                   f"detected after {_ms(f.get('detect_ms'))} by "
                   f"{f.get('detected_by') or 'nothing'}; training {training} iterations")


def controller_crash_lossless(r: Results) -> Verdict:
    """The lesson: killing the controller loses no probe (rules are proactive)."""
    kill = _fault(r, "crash", "controller_kill")
    back = _fault(r, "crash", "controller_restart")
    lost = kill.get("lost_packets", 0) + back.get("lost_packets", 0)
    return verdict(lost == 0, f"{lost} probes lost while the controller was down and when it "
                              f"came back; {kill.get('chains_failed', 0)} chains failed")


CHECKS = [link_cut_repaired, lossy_link_drained, plane_loss_survived,
          controller_crash_lossless]
