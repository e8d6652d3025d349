"""Lab 4 checks: ECN and DCQCN tuned for collectives against agent traffic
(``testbed check 4 RESULTS``), on a results folder of ``labs/lab04_ecn/*/scenario.yaml``.
With several seeds, summary.json's ``runs`` entries hold the medians over seeds.
"""

from __future__ import annotations

from testbed.reports.grading import Results, Verdict, verdict
from testbed.reports.predictions import Choice

OFF, MINE = "ecn-off", "ecn-student"
P99_CUT = 0.30       # chain p99 at least 30 % below ecn-off's
TRAINING_COST = 0.10  # training goodput at most 10 % below ecn-off's
STAYS = 0.10  # a prediction's "stays": within 10 % of ecn-off's


def same_fabric(r: Results) -> Verdict:
    """Both variants on the same 4:1 fabric with training and chains."""
    over = {n: float(r.spec(n)["oversubscription"]) for n in (OFF, MINE)}
    idle = [n for n in (OFF, MINE) if not r.value(n, "training.iterations")
            or not r.value(n, "agents.chains_completed")]
    wrong = [f"{n} ran {o:g}:1" for n, o in over.items() if o != 4.0]
    wrong += [f"{n} ran no training or no chains" for n in idle]
    return verdict(not wrong, "; ".join(wrong) or "both on 4:1, chains and training in both")


def marked_per_class(r: Results) -> Verdict:
    """The switches marked CE in ecn-student, and the collective's senders got CNPs."""
    marked = r.value(MINE, "ecn.marked")
    cnps = r.value(MINE, "training.cnps_received")
    ok = marked.get("collective", 0) > 0 and cnps > 0
    return verdict(ok, f"CE marks: collective {marked.get('collective', 0):,}, agents "
                       f"{marked.get('agents', 0):,}; CNPs received by the senders {cnps:,}"
                   + ("" if ok else " (nothing marked: is ecn.mode phantom and training.ecn on?)"))


def chain_p99_cut(r: Results) -> Verdict:
    """Student task: chain p99 at least 30 % below ecn-off's."""
    off, mine = (r.value(n, "agents.latency_ms.p99") for n in (OFF, MINE))
    cut = 1 - mine / off
    return verdict(cut >= P99_CUT, f"chain p99 {mine:.0f} ms against {off:.0f} ms with ECN off "
                                   f"({cut:+.0%} cut, needs >= {P99_CUT:.0%})")


def training_kept(r: Results) -> Verdict:
    """Student task: training goodput at most 10 % below ecn-off's."""
    off, mine = (r.value(n, "training.goodput_mbps") for n in (OFF, MINE))
    cost = 1 - mine / off
    return verdict(cost <= TRAINING_COST,
                   f"training {mine:.1f} Mb/s against {off:.1f} Mb/s with ECN off "
                   f"({-cost:+.0%}, may lose at most {TRAINING_COST:.0%})")


CHECKS = [same_fabric, marked_per_class, chain_p99_cut, training_kept]


def _trend(path: str):
    """down, stays or up: ecn-student's figure against ecn-off's (stays: within 10 %)."""
    def measure(r: Results) -> str:
        off, mine = (r.value(n, path) for n in (OFF, MINE))
        change = mine / off - 1
        return "stays" if abs(change) <= STAYS else ("down" if change < 0 else "up")
    return measure


#: the guide's "Predict, then run" question 1 graded against the run (predictions.yaml):
#: the way chain p99 (1a) and the collective's goodput (1b) go against ECN off
PREDICTIONS = [
    Choice("1a", _trend("agents.latency_ms.p99"), ("down", "stays", "up")),
    Choice("1b", _trend("training.goodput_mbps"), ("down", "stays", "up")),
]
