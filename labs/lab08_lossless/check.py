"""Lab 8 checks: lossless RoCE with PFC and a queue per tenant (``testbed check 8
RESULTS``), on a results folder of ``labs/lab08_lossless/*/scenario.yaml``: B's chains
alone (``b-alone``), both tenants in one FIFO per port (``one-fifo``), and the student's
classes (``tenants-student``).
"""

from __future__ import annotations

from testbed.reports.grading import Results, Verdict, failed, verdict
from testbed.reports.predictions import Number

ALONE, FIFO, MINE = "b-alone", "one-fifo", "tenants-student"
P99_RATIO = 1.2  # B's chain p99 at most 1.2x of B alone


def same_fabric(r: Results) -> Verdict:
    """The lesson: all three on the 4:1 fabric; training in one-fifo and the student's."""
    over = {n: float(r.spec(n)["oversubscription"]) for n in (ALONE, FIFO, MINE)}
    wrong = [f"{n} ran {o:g}:1" for n, o in over.items() if o != 4.0]
    wrong += [f"{n} ran no training" for n in (FIFO, MINE)
              if not r.value(n, "training.iterations")]
    return verdict(not wrong, "; ".join(wrong) or "all on 4:1, training in one-fifo and "
                                                   "tenants-student")


def fifo_hurts(r: Results) -> Verdict:
    """The lesson: in one FIFO, A's training makes B's chain p99 worse than 1.2x of alone."""
    alone, fifo = (r.value(n, "agents.latency_ms.p99") for n in (ALONE, FIFO))
    return verdict(fifo > P99_RATIO * alone, f"one FIFO: B's chain p99 {fifo:.0f} ms, "
                                             f"{fifo / alone:.2f}x of B alone ({alone:.0f} ms)")


def roce_lossless(r: Results) -> Verdict:
    """Student task: a lossless class with PFC; no RoCE packet dropped by a switch."""
    q = r.value(MINE, "qos")
    if not q.get("pfc"):
        return verdict(False, "tenants-student runs without PFC (qos.pfc.enabled)")
    drops = {name: q["per_class"].get(name, {}).get("drops", 0)
             for name in q.get("lossless_classes", [])}
    xoff = q["pfc_frames"]["xoff_tx"]
    ok = bool(drops) and sum(drops.values()) == 0 and xoff > 0
    named = ", ".join(f"{n} {d:,}" for n, d in drops.items()) or "no lossless class"
    return verdict(ok, f"dropped by switches in the lossless class(es): {named}; "
                       f"{xoff:,} XOFF frames sent")


def headroom_held(r: Results) -> Verdict:
    """Student task: the measured reaction (p99) within what the headroom was sized for."""
    q = r.value(MINE, "qos")
    measured, assumed = q.get("reaction_p99_sum_ms"), q.get("reaction_assumed_ms")
    if measured is None:
        return failed(f"{MINE} measured no PFC reaction (no pause was sent: is "
                      "qos.pfc.enabled on?)")
    ok = measured <= assumed
    return verdict(ok, f"reaction p99 {measured} ms (poll + frame + apply) against "
                       f"{assumed} ms in the headroom" + ("" if ok else ": raise "
                       "pfc.reaction_ms and the buffer, or read the queues more often"))


def tenant_b_isolated(r: Results) -> Verdict:
    """Student task: B's chain p99 at most 1.2x of B alone, with A's training running."""
    alone, mine = (r.value(n, "agents.latency_ms.p99") for n in (ALONE, MINE))
    return verdict(mine <= P99_RATIO * alone,
                   f"B's chain p99 {mine:.0f} ms, {mine / alone:.2f}x of B alone "
                   f"({alone:.0f} ms; needs <= {P99_RATIO:g}x)")


CHECKS = [same_fabric, fifo_hurts, roce_lossless, headroom_held, tenant_b_isolated]


#: the guide's "Predict, then run" question 1 graded against the run (predictions.yaml):
#: B's chain p99 in one FIFO over B alone, right within 25 %
PREDICTIONS = [Number("1", lambda r: r.value(FIFO, "agents.latency_ms.p99")
                      / r.value(ALONE, "agents.latency_ms.p99"), unit="x", within=0.25)]
