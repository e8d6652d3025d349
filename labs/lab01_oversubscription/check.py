"""Lab 1 checks: oversubscription and agent chains (``testbed check 1 RESULTS``).

Grades a results folder of ``labs/lab01_oversubscription/*/scenario.yaml``: the lesson
reproduced (chains are the sum of their hops, 4:1 hurts them), then the student's paced
variant (chains protected without starving the collective).
"""

from __future__ import annotations

import json

from testbed.core import layout
from testbed.reports.grading import Results, Verdict, failed, passed, verdict
from testbed.reports.predictions import Number

ALONE, ALONE4, FULL, OVER, PACED = ("agents-only", "agents-only-4to1", "training-1to1",
                                    "training-4to1", "training-4to1-paced")
HURT = 1.5      # 4:1 without pacing: chain p99 at least this many times 1:1's
PROTECTED = 1.5  # the paced variant: chain p99 at most this many times the chains' alone on 4:1


def _p99(r: Results, name: str) -> float:
    return r.value(name, "agents.latency_ms.p99")


def chains_complete(r: Results) -> Verdict:
    """Every variant ran chains and lost at most 1 % of them."""
    bad = []
    for name in (ALONE, ALONE4, FULL, OVER, PACED):
        started = r.value(name, "agents.chains_started")
        done = r.value(name, "agents.chains_completed")
        if started == 0 or done < 0.99 * started:
            bad.append(f"{name} {done}/{started}")
    if bad:
        return failed("chains missing or failed: " + ", ".join(bad))
    return passed("every variant completed >= 99 % of its chains")


def latency_is_sum_of_hops(r: Results) -> Verdict:
    """A chain's latency is the sum of its hops (p50 within 5 % of the hop sum's)."""
    worst = ("", 0.0)
    for name in r.names():
        lat = r.value(name, "agents.latency_ms.p50")
        hops = r.value(name, "agents.hop_sum_ms.p50")
        gap = abs(lat - hops) / lat
        if gap > worst[1]:
            worst = (name, gap)
    name, gap = worst
    return verdict(gap <= 0.05, f"largest gap between chain p50 and hop-sum p50: "
                                f"{gap:.1%}{' (' + name + ')' if name else ''}, limit 5 %")


def fabrics_as_asked(r: Results) -> Verdict:
    """The variants ran on the fabrics they claim (spec.json: oversubscription)."""
    want = {ALONE: 1.0, ALONE4: 4.0, FULL: 1.0, OVER: 4.0, PACED: 4.0}
    got = {name: float(r.spec(name)["oversubscription"]) for name in want}
    wrong = [f"{n} ran {got[n]:g}:1, expected {w:g}:1" for n, w in want.items() if got[n] != w]
    training = [n for n in (FULL, OVER, PACED) if not r.value(n, "training.iterations")]
    wrong += [f"{n} ran training" for n in (ALONE, ALONE4) if r.value(n, "training.iterations")]
    wrong += [f"{n} completed no training iteration" for n in training]
    return verdict(not wrong, "; ".join(wrong) or "1:1 and 4:1 as named; training where "
                                                  "named")


def paced_slower(r: Results) -> Verdict:
    """Student task: the paced variant's senders are configured below the unpaced rate
    (its training.json, the collective's configuration as the run used it)."""
    over, paced = (json.loads(r.record(n, layout.TRAINING_CONFIG).read_text())["rate_mbps"]
                   for n in (OVER, PACED))
    return verdict(paced < over, f"{PACED} sends at {paced:g} Mb/s per rank and plane, "
                                 f"{OVER} at {over:g}" + ("" if paced < over else
                                                          ": pace it (the TODO)"))


def oversubscription_hurts(r: Results) -> Verdict:
    """The lesson: on 4:1 the same bursts multiply chain p99 (>= 1.5x that on 1:1)."""
    full, over = _p99(r, FULL), _p99(r, OVER)
    return verdict(over >= HURT * full, f"chain p99 {over:.0f} ms on 4:1 against {full:.0f} "
                                        f"ms on 1:1 ({over / full:.2f}x, expected >= {HURT}x)")


def paced_protects_chains(r: Results) -> Verdict:
    """Student task: the paced 4:1 variant keeps chain p99 within 1.5x of the chains
    alone on the same 4:1 fabric."""
    alone, paced = _p99(r, ALONE4), _p99(r, PACED)
    rate = r.value(PACED, "training.goodput_mbps")
    return verdict(paced <= PROTECTED * alone,
                   f"chain p99 {paced:.0f} ms paced against {alone:.0f} ms alone on 4:1 "
                   f"({paced / alone:.2f}x, limit {PROTECTED}x; training {rate:.1f} Mb/s)")


def paced_trains_no_less(r: Results) -> Verdict:
    """Student task: pacing does not cost the collective (goodput >= unpaced 4:1's)."""
    over, paced = (r.value(n, "training.goodput_mbps") for n in (OVER, PACED))
    lost = r.value(PACED, "training.packets_lost")
    return verdict(paced >= over, f"training goodput {paced:.1f} Mb/s paced against "
                                  f"{over:.1f} Mb/s unpaced on 4:1 ({lost} packets lost "
                                  "paced); must be at least as much")


CHECKS = [chains_complete, latency_is_sum_of_hops, fabrics_as_asked, oversubscription_hurts,
          paced_slower, paced_protects_chains, paced_trains_no_less]


def _ratio(top: str, bottom: str):
    return lambda r: _p99(r, top) / _p99(r, bottom)


#: the guide's "Predict, then run" questions graded against the run (predictions.yaml):
#: chain p99 ratios, right within 25 %
PREDICTIONS = [
    Number("1a", _ratio(FULL, ALONE), unit="x", within=0.25),
    Number("1b", _ratio(ALONE4, ALONE), unit="x", within=0.25),
    Number("2", _ratio(OVER, FULL), unit="x", within=0.25),
]
