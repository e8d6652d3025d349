"""Lab 10 checks: acceptance before production and node replacement (``testbed check 10
RESULTS``), on a results folder of ``labs/lab10_acceptance/*/scenario.yaml``: the
workloads on a rack with four planted faults, unaccepted and accepted, against a healthy
rack, and a node degraded during the run.

Graded from what the run recorded per variant: ``acceptance`` (what was planted, what
the checks excluded and its ``score``: found, missed, extra), ``agents`` (chains
completed, failed, latency) and ``replacement`` (the health loop's declarations, what
moved where, the chains that started after each).

Per student (``testbed start 10 --student ID``): the seed, and with it where the four
faults are planted; ``student-variant`` checks that the run planted them where the id's
seed puts them. Only seeds whose plants touch at most three nodes are given (the
measured seeds 1 to 3 touch two or three; a fourth would send every role to a spare).

>>> from testbed.reports.students import Draw
>>> student_params(Draw(10, "ada")) == student_params(Draw(10, "ada"))
True
>>> planted(1)  # the guide's table (seed 1)
['p0l1-p0s2', 'n4-p0l2', 'n0p0r0', 'n1p0r0']
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

from testbed.reports.grading import Missing, Results, Verdict, verdict
from testbed.reports.predictions import Number
from testbed.reports.students import SEEDS, Draw

UNACCEPTED, ACCEPTED, HEALTHY, REPLACED = "unaccepted", "accepted", "healthy", "replaced"
PLANTS = ("rate", "degrade", "swap_rails", "throttle")  # the starter's four plants
CHAINS_SHARE = 0.5   # the unaccepted rack "fails chains": some failed, or under half of
                     # what the healthy rack completed
P99_RATIO = 1.5      # accepted rack's chain p99 at most 1.5x the healthy rack's, same run
DEGRADED = "n4"      # the node the lab's fault degrades (n4-p0l2: its rail-0 cable)
_NODE = re.compile(r"^n\d+")


def _chains(r: Results, variant: str) -> tuple[int, int, int]:
    """Chains started, completed and failed in ``variant``."""
    return tuple(r.value(variant, f"agents.chains_{k}")
                 for k in ("started", "completed", "failed"))  # type: ignore[return-value]


def _plant_of(item: str, planted: list[dict]) -> str:
    """The planted fault an expected exclusion (a link or a node) comes from."""
    for f in planted:
        target = f["target"]
        node = _NODE.match(target)
        if item == target or (node and (item == node.group()
                                        or (f["action"] == "swap_rails"
                                            and item.startswith(node.group() + "-")))):
            return f"{f['action']} {target}"
    return item


def unaccepted_fabric_fails(r: Results) -> Verdict:
    """The lesson: the workloads on the unaccepted rack (the four faults, no checks) fail
    chains: some fail, or fewer than half of the healthy rack's complete."""
    started, done, failed = _chains(r, UNACCEPTED)
    healthy = r.value(HEALTHY, "agents.chains_completed")
    ok = failed > 0 or done < CHAINS_SHARE * healthy
    return verdict(ok, f"unaccepted rack: {done} of {started} chains completed, {failed} "
                       f"failed; the healthy rack completed {healthy}"
                   + ("" if ok else "; were the plants removed?"))


def every_planted_fault_found(r: Results) -> Verdict:
    """Student task: acceptance finds every planted fault (each exclusion it must make)
    and excludes nothing healthy."""
    record = r.run(ACCEPTED).get("acceptance") or {}
    if not record.get("enabled"):
        return verdict(False, "acceptance did not run in the accepted variant "
                              "(acceptance.enabled is false)")
    planted = record.get("planted") or []
    kinds = {f["action"] for f in planted}
    if not set(PLANTS) <= kinds:
        return verdict(False, f"planted: {', '.join(sorted(kinds)) or 'nothing'}; the lab "
                              f"plants {', '.join(PLANTS)}: keep the starter's plants")
    score = record.get("score")
    if score is None:
        raise Missing("variant accepted: summary.json has no acceptance.score")
    found, missed, extra = score["found"], score["missed"], score["extra"]
    said = (f"{len(found)} exclusions of {len(found) + len(missed)} made "
            f"({', '.join(found) or 'none'}) in {record.get('seconds', 0):.1f} s")
    if missed:
        faults = sorted({_plant_of(m, planted) for m in missed})
        said += (f"; missed {', '.join(faults)} (not excluded: {', '.join(missed)}): "
                 "which check sees a link's rate and loss, which a NIC that slows only "
                 "under sustained load?")
    if extra:
        said += f"; healthy but excluded: {', '.join(extra)}"
    elif not missed:
        said += f": all {len(planted)} planted faults, nothing healthy excluded"
    return verdict(not missed and not extra, said)


def accepted_fabric_carries_chains(r: Results) -> Verdict:
    """Student task: on the accepted rack (faults excluded, roles on spares) no chain
    fails, and the chains' p99 is at most 1.5x the healthy rack's in the same run."""
    started, done, failed = _chains(r, ACCEPTED)
    if not done:
        return verdict(False, f"accepted rack: none of {started} chains completed")
    p99 = r.value(ACCEPTED, "agents.latency_ms.p99")
    healthy = r.value(HEALTHY, "agents.latency_ms.p99")
    ratio = p99 / healthy
    ok = failed == 0 and ratio <= P99_RATIO
    return verdict(ok, f"accepted rack: {done} of {started} chains completed, {failed} "
                       f"failed; p99 {p99:.1f} ms against {healthy:.1f} ms on the healthy "
                       f"rack ({ratio:.2f}x, limit {P99_RATIO:g}x)")


def degraded_node_replaced(r: Results) -> Verdict:
    """Student task: the node degraded during the run is declared, its services move to
    a spare, and no chain started after the declaration fails."""
    run = r.run(REPLACED)
    started, _, failed = _chains(r, REPLACED)
    record = run.get("replacement")
    if not record:
        return verdict(False, f"the health loop was off: nothing replaced {DEGRADED} "
                              f"({failed} of {started} chains failed)")
    events = [e for e in record.get("events") or () if e.get("node") == DEGRADED]
    if not events:
        declared = ", ".join(e["node"] for e in record.get("events") or ()) or "none"
        error = f"; the loop's error: {record['error']}" if record.get("error") else ""
        return verdict(False, f"the health loop watched {', '.join(record.get('watched', []))}"
                              f" and did not declare {DEGRADED} (declared: {declared}{error})")
    e = events[0]
    said = f"{DEGRADED} declared at {e['declared_s']:.1f} s: {e['reason']}"
    if not e.get("moved"):
        return verdict(False, f"{said}, nothing moved: {e.get('action')}")
    moved = ", ".join(f"{role} to {node}" for role, node in e["moved"].items())
    after, failed_after = e.get("chains_after"), e.get("chains_failed_after")
    if after is None or failed_after is None:
        raise Missing("variant replaced: the replacement record has no chains_after")
    ok = failed_after == 0 and after > 0  # chains ran on after it, none failed
    took = "-" if e.get("replace_ms") is None else f"{e['replace_ms']:.0f}"
    return verdict(ok, f"{said}; {moved} in {took} ms; {failed_after} of "
                       f"{after} chains started after it failed"
                   + ("" if ok else f" ({', '.join(e.get('failed_after') or [])})"))


CHECKS = [unaccepted_fabric_fails, every_planted_fault_found,
          accepted_fabric_carries_chains, degraded_node_replaced]


#: the guide's "Predict, then run" question 3 graded against the run (predictions.yaml):
#: the chains the unaccepted rack completes, right within 5 chains
PREDICTIONS = [Number("3", lambda r: _chains(r, UNACCEPTED)[1], unit="chains", within_abs=5)]


# --- per-student variants (testbed start 10 --student ID) -------------------------------

STARTER = Path(__file__).parent / "starter" / "scenario.yaml"
MAX_NODES_PLANTED = 3  # seeds 1-3 (measured) plant on 3, 3 and 2 nodes


@functools.lru_cache(maxsize=1)
def _rack():
    """The starter's accepted rack: its spec and acceptance section."""
    from testbed.core import scenario
    from testbed.core.tools import SPEC_PREFIX

    variant = scenario.load(STARTER).variant(ACCEPTED)
    return variant.fabric(SPEC_PREFIX), variant.acceptance


def _place(seed: int) -> tuple[list[str], list[str]]:
    from testbed.acceptance.step import nodes_touched, place

    spec, acceptance = _rack()
    faults = place(spec, [dict(p) for p in acceptance["plant"]], acceptance["spares"], seed)
    return [f["target"] for f in faults], nodes_touched(spec, faults)


def planted(seed: int) -> list[str]:
    """Where the starter's four plants land with ``seed`` (rate, degrade, swap_rails,
    throttle)."""
    return _place(seed)[0]


def student_params(draw: Draw) -> dict:
    """A student's seed (one whose plants touch at most :data:`MAX_NODES_PLANTED` nodes)
    and where it plants the faults."""
    for attempt in range(64):
        seed = draw.between("seed" if attempt == 0 else f"seed/{attempt}", *SEEDS)
        targets, nodes = _place(seed)
        if len(nodes) <= MAX_NODES_PLANTED:
            return {"seed": seed, "planted": targets}
    raise RuntimeError("no seed among 64 plants on few enough nodes")  # 1 in 10^50


def student_stated(r: Results) -> dict:
    """Where the run planted the faults (the accepted variant's acceptance record)."""
    record = r.run(ACCEPTED).get("acceptance") or {}
    return {"planted": [f.get("target") for f in record.get("planted") or []]}
