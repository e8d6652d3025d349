"""The system test: a collective over every node the checks before left, its time against
what the fabric's capacity allows, and each node against the others.

A ring all-reduce (the lab's training ranks, :mod:`traffic.training`: RoCEv2 frames,
one channel on every NIC of a node, each to the same NIC of the next node, as rails
pair them, paced at :data:`RATE_SHARE` of the NIC's rate, no compute) runs
:data:`ITERATIONS` iterations with one rank a node, sized so that every NIC sends for
:data:`SUSTAIN_S` at that pace: sustained load, four times the link check's window, so a
NIC that keeps up for a short test and then slows shows here.

* The system: the median iteration's time against the calculator's bound for a ring
  all-reduce, 2 (N-1)/N x bytes over each node's NIC capacity (all its NICs' links
  together, :func:`topologies.calculator.allreduce_ms`). It passes within
  :data:`SYSTEM_FACTOR` times the bound (the rest: the ring's steps waiting for each
  other, and software switches).
* Each node: the time its rank spent handing its chunks to its NICs per iteration
  (``send_ms``; a slow NIC holds its sender back), the median over the second half of
  the iterations (sustained load: a NIC's burst allowance is spent by then; the first
  throttled runs showed a whole-run median hiding it). A node is an outlier, by a
  threshold set before any fault was planted, when its median exceeds the median of
  all nodes by more than :data:`MAD_K` scaled median absolute deviations (1.4826 x
  MAD, the normal distribution's sigma) and by more than :data:`MIN_EXCESS` of that
  median: robust to one bad node among few (the median and MAD ignore it), and not
  fooled by a spread that is tiny in absolute terms. Outliers are excluded and the
  collective runs once more without them, to show the rest passes as a system.
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

from testbed.host.files import read_jsonl
from testbed.host.procs import wait_for
from testbed.workloads.chains import TRAFFIC
from testbed.workloads.generators import training_config
from topologies.calculator import allreduce_ms
from topologies.spec import FabricSpec

ITERATIONS = 6
SUSTAIN_S = 2.0
RATE_SHARE = 0.9
PAYLOAD = 4096
SYSTEM_FACTOR = 2.0
MAD_K = 3.0
MIN_EXCESS = 0.5
READY_S = 60.0
START_MARGIN_S = 0.2


def outliers(values: dict[str, float]) -> dict[str, str]:
    """The nodes whose value is an outlier by the module's rule, with why.

    >>> outliers({"n0": 40.1, "n1": 41.0, "n2": 39.8, "n3": 160.2, "n4": 40.5})
    {'n3': 'sends its chunks in 160.2 ms an iteration; the median node 40.5 ms'}
    >>> outliers({"n0": 40.1, "n1": 41.0, "n2": 39.8, "n3": 44.0})
    {}
    """
    if len(values) < 3:
        return {}
    med = statistics.median(values.values())
    mad = statistics.median(abs(v - med) for v in values.values()) * 1.4826
    return {n: f"sends its chunks in {v:.1f} ms an iteration; the median node {med:.1f} ms"
            for n, v in values.items()
            if v > med + MAD_K * mad and v > med * (1 + MIN_EXCESS)}


def collective_bytes(spec: FabricSpec, ranks: int) -> int:
    """The all-reduce's size: each NIC busy :data:`SUSTAIN_S` at :data:`RATE_SHARE` of its
    rate over :data:`ITERATIONS` (a rank sends 2 (N-1)/N of it an iteration).

    >>> from topologies.leafspine import build_fabric
    >>> collective_bytes(build_fabric(prefix="tbdoc0", planes=2, nodes=8,
    ...                               leaves_per_plane=2, spines_per_plane=2, link_mbps=20), 8)
    857142
    """
    nics = len(spec.hosts[0].interfaces)
    per_rank = SUSTAIN_S * RATE_SHARE * spec.link_mbps * 1e6 / 8 * nics
    return int(per_rank / ITERATIONS / (2 * (ranks - 1) / ranks))


def collective(lab, nodes: list[str], folder: Path, tag: str) -> dict:
    """One all-reduce over ``nodes`` (short names); per node its median ``send_ms``, the
    median iteration, the bound."""
    spec: FabricSpec = lab.spec
    index = {h.name[len(spec.prefix):]: i for i, h in enumerate(spec.hosts)}
    rate = RATE_SHARE * spec.link_mbps
    size = collective_bytes(spec, len(nodes))
    params = {"ranks": [index[n] for n in nodes], "bytes": size, "compute_ms": 0,
              "rate_mbps": rate, "payload": min(PAYLOAD, spec.mtu - 64),
              "step_timeout_ms": 2000}
    folder.mkdir(parents=True, exist_ok=True)
    config = folder / f"{tag}-config.json"
    data = training_config(spec, params)
    for rank, node in zip(data["ranks"], nodes, strict=True):  # every NIC, rail by rail
        rank["channels"] = [{"iface": i.name, "ip": i.ip, "mac": i.mac}
                            for i in spec.host(spec.prefix + node).interfaces]
    config.write_text(json.dumps(data, indent=1))
    start = lab.pid_dir / f"{tag}.start"
    start.unlink(missing_ok=True)
    procs, outs, ready = [], [], []
    try:
        for rank, node in enumerate(nodes):
            ready.append(lab.pid_dir / f"{tag}-rank{rank}.ready")
            ready[-1].unlink(missing_ok=True)
            outs.append(folder / f"{tag}-rank{rank}.jsonl")
            outs[-1].unlink(missing_ok=True)  # an earlier check's
            procs.append(lab.host(spec.prefix + node).spawn(
                f"{tag}-rank{rank}",
                [*TRAFFIC, "training", "--rank", str(rank), "--config", str(config),
                 "--out", str(outs[-1]), "--iterations", str(ITERATIONS),
                 "--ready-file", str(ready[-1]), "--start-file", str(start)],
                pid_dir=lab.pid_dir, log=folder / f"{tag}-rank{rank}.log"))
        wait_for(lambda: all(f.exists() or not p.alive() for f, p in zip(ready, procs,
                                                                           strict=True)),
                 READY_S, interval=0.02)
        tmp = start.with_suffix(".tmp")
        tmp.write_text(f"{time.time() + START_MARGIN_S:.6f}")
        tmp.replace(start)
        budget = READY_S + ITERATIONS * 2 * len(nodes) * 2.0
        for p in procs:
            p.wait(budget)
    finally:
        for p in procs:
            p.stop(2.0)
        start.unlink(missing_ok=True)
    send, iteration, complete = {}, [], True
    for node, out in zip(nodes, outs, strict=True):
        rows = list(read_jsonl(out)) if out.exists() else []
        rows = [r for r in rows if r.get("complete")]
        if len(rows) < ITERATIONS:
            complete = False
        late = rows[len(rows) // 2:]  # sustained load: the second half of the iterations
        send[node] = statistics.median(r["send_ms"] for r in late) if late else None
        iteration += [r["comm_ms"] for r in rows]
    nics = len(spec.hosts[0].interfaces)
    bound = allreduce_ms(size, len(nodes), spec.link_mbps * nics)
    measured = statistics.median(iteration) if iteration else None
    return {"nodes": nodes, "bytes": size, "complete": complete,
            "send_ms": {n: (round(v, 2) if v is not None else None) for n, v in send.items()},
            "iteration_ms": round(measured, 1) if measured is not None else None,
            "bound_ms": round(bound, 1),
            "ratio": round(measured / bound, 2) if measured is not None else None}


def check(lab, nodes: list[str]) -> dict:
    """The system test's record: the collective, the outliers (excluded, with why), and
    the collective again without them."""
    t0 = time.monotonic()
    folder = lab.out / "acceptance"
    first = collective(lab, nodes, folder, "system")
    silent = [n for n, v in first["send_ms"].items() if v is None]
    odd = outliers({n: v for n, v in first["send_ms"].items() if v is not None})
    odd |= {n: "its rank finished no iteration" for n in silent}
    runs = [first]
    rest = [n for n in nodes if n not in odd]
    if odd and len(rest) >= 2:
        runs.append(collective(lab, rest, folder, "system-again"))
    last = runs[-1]
    passes = (last["complete"] and last["ratio"] is not None
              and last["ratio"] <= SYSTEM_FACTOR)
    return {"check": "system", "seconds": round(time.monotonic() - t0, 2),
            "rule": f"a ring all-reduce, every NIC busy {SUSTAIN_S:g} s in {ITERATIONS} "
                    f"iterations, "
                    f"within {SYSTEM_FACTOR:g}x the capacity bound; a node is an outlier "
                    f"beyond the median + {MAD_K:g} scaled MADs and +{MIN_EXCESS:.0%}",
            "runs": runs,
            "nodes": [{"node": n, "verdict": "excluded", "reason": why}
                      for n, why in sorted(odd.items())],
            "verdict": "passes" if passes else "fails",
            "reason": "" if passes else (
                "a rank did not finish" if not last["complete"] else
                f"{last['iteration_ms']} ms an iteration, {last['ratio']}x the bound "
                f"{last['bound_ms']} ms")}
