"""Run a variant's faults: probes between host pairs, the fault schedule, the accounting.

The runner calls :func:`start` once traffic is starting and :meth:`FaultRun.stop`
before teardown; :meth:`FaultRun.entries` (after teardown) turns what was written into
the run's ``faults`` entries (:mod:`testbed.faults.accounting`). Probes: a stream per
(host, plane, flow) for two host pairs on different switches of tier 0 (leaves, edge
switches), every plane, ``FLOWS`` UDP ports each (so the switches' ECMP hashing spreads
them over the spines, and a cut spine link hits some of them), at ``RATE`` per second;
one ``traffic.probe`` process a host sends all of that host's streams.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from testbed.core import digest, layout
from testbed.core.layout import run_dirs
from testbed.faults import accounting as resilience
from testbed.faults.fabric import FabricFaults
from testbed.faults.schedule import Schedule
from testbed.host.files import read_jsonl
from testbed.host.procs import Helper
from traffic.probe import PORT as PROBE_PORT

RATE = 100.0  # probes per second per stream: 10 ms resolution for repair times
FLOWS = 2


def probe_pairs(spec) -> list[tuple[int, int]]:
    """Up to two node pairs whose traffic crosses the fabric: each a host from the front
    and one from the back attached (on plane 0) to different switches of tier 0, so
    their traffic leaves the switch it started on; first/last and second/second-last
    on a leaf-spine.

    >>> from topologies.leafspine import build_fabric
    >>> probe_pairs(build_fabric(prefix="tbdoc0", nodes=8, leaves_per_plane=2))
    [(0, 7), (1, 6)]
    >>> from topologies.fattree import build_fattree
    >>> probe_pairs(build_fattree(prefix="tbdoc0", k=4))  # other pods: the cores
    [(0, 15), (1, 14)]
    >>> probe_pairs(build_fabric(prefix="tbdoc0", nodes=8, leaves_per_plane=1))  # one switch
    [(0, 7)]
    """
    n = len(spec.hosts)
    edge = [h.interfaces[0].switch for h in spec.hosts]
    pairs: list[tuple[int, int]] = []
    used: set[int] = set()
    for a in range(n):
        if len(pairs) == (2 if n >= 4 else 1):
            break
        b = next((b for b in range(n - 1, a, -1)
                  if b not in used and a not in used and edge[a] != edge[b]), None)
        if b is not None:
            pairs.append((a, b))
            used |= {a, b}
    return pairs or [(0, n - 1)]  # every host on one switch: still probe it


@dataclass
class FaultRun:
    live: object
    out: Path
    schedule: Schedule
    t0: float
    probes: list[Helper] = field(default_factory=list)
    probe_files: list[Path] = field(default_factory=list)
    end: float = 0.0

    def stop(self, end: float) -> None:
        """Stop the schedule (faults not yet due are skipped) and the probes."""
        self.end = end
        self.schedule.stop()
        self.schedule.join(10)
        if self.schedule.running():  # an action still at work (a rack's acceptance):
            self.schedule.join(ACTION_MAX_S)  # the fabric stays until it is done
        for p in self.probes:
            p.stop()
        records = [r.to_dict() for r in self.schedule.records]
        (self.out / layout.FAULTS).write_text(json.dumps(
            {"t0": self.t0, "end": end, "records": records}, indent=1))

    def entries(self) -> list[dict]:
        """The ``faults`` entries, from the files the run wrote (call after :meth:`stop`)."""
        return entries_from_files(self.out)


#: how long the end of a run waits for a fault action still at work (a rack being added)
ACTION_MAX_S = 180.0


def start(live, faults, *, out: Path, t0: float, duration_s: float,
          stack: ExitStack, seed: int = 1) -> FaultRun:
    """Start probes (now) and the fault schedule (``at_s`` counted from ``t0``)."""
    spec = live.spec
    actions = FabricFaults(live, stack, seed=seed).actions(names=[f.action for f in faults])
    run = FaultRun(live=live, out=out, schedule=Schedule(list(faults), actions), t0=t0)
    length = f"{duration_s + (t0 - time.time()) + 1:.3f}"
    for a, b in probe_pairs(spec):
        for me, peer in ((a, b), (b, a)):
            # one process a host for all its streams (a plane and a flow each)
            host, streams = spec.hosts[me], []
            for plane in range(spec.planes):
                for flow in range(FLOWS):
                    name = f"n{me}p{plane}f{flow}"
                    path = out / layout.probe_file(name)
                    streams += ["--stream", ",".join((
                        name, host.interface(plane, 0).ip, str(PROBE_PORT + flow), str(path),
                        f"n{peer}p{plane}f{flow}={spec.hosts[peer].interface(plane, 0).ip}"))]
                    run.probe_files.append(path)
            helper = live.fabric.spawn(
                host.name, f"probe-n{me}",
                [sys.executable, "-m", "traffic.probe", "--rate", f"{RATE:g}",
                 "--duration", length, *streams],
                pid_dir=live.pid_dir, log=out / layout.probe_log(f"n{me}"))
            stack.callback(helper.stop)
            run.probes.append(helper)
    run.schedule.start(t0)
    return run




def entries_from_files(vdir: Path) -> list[dict]:
    """A variant's ``faults`` entries computed again from what its run wrote in ``vdir``."""
    meta = json.loads((vdir / layout.FAULTS).read_text())
    iterations = [rec for f in sorted(vdir.glob(layout.RANK_GLOB)) for rec in read_jsonl(f)]
    probes = [rec for f in sorted(vdir.glob(layout.PROBE_GLOB)) for rec in read_jsonl(f)]
    return resilience.fault_entries(
        meta["records"], end=meta["end"], chains=list(read_jsonl(vdir / layout.CHAINS)),
        hops=list(read_jsonl(vdir / layout.HOPS)),
        events=list(read_jsonl(vdir / layout.CONTROLLER_EVENTS)),
        streams=resilience.probe_streams(probes), iterations=iterations)


def reanalyze(out: Path) -> dict:
    """Recompute every run's ``faults`` (and the top-level list) of a results folder, then
    rewrite summary.json and the report: ``python -m testbed.faults.run RESULTS_DIR``."""
    from testbed.host.files import write_json
    from testbed.reports import report

    summary = json.loads((out / layout.SUMMARY).read_text())
    faults = []
    for run in summary["runs"]:
        entries = run.get("seeds") or [run]
        for entry, vdir in zip(entries, run_dirs(run, out), strict=True):
            if (vdir / layout.FAULTS).exists():
                entry["faults"] = entries_from_files(vdir)
                faults += [{"variant": run["name"],
                            **({"seed": entry["seed"]} if "seed" in entry else {}), **f}
                           for f in entry["faults"]]
        if entries[0].get("faults") is not None:
            run["faults"] = entries[0]["faults"]
    summary["faults"] = faults
    write_json(out / layout.SUMMARY, summary)
    report.write(summary, out)
    if (out / layout.DIGEST).exists():  # the records changed on purpose: a new digest
        digest.write(out)
    return summary


if __name__ == "__main__":
    reanalyze(Path(sys.argv[1]))
