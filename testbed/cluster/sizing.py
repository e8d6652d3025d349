"""How many machines a fabric and its load need, from what the parts cost on one.

The lab's work on a machine is, to a first order, four things, each measured on a
machine by ``make bench BENCH=sizing`` (:mod:`bench.sizing_bench`) into a
:class:`Costs` file:

* switch processes awake with nothing to forward: a constant per process and a cost
  per port it polls (the userspace datapath polls every port each time it wakes), and
  the controller asking every switch for its statistics (on the first machine, where
  it runs);
* agent chains: the generators' CPU per chain in flight, the frames a chain in flight
  puts on the fabric per second, and the switches' CPU per forwarding of those frames
  (a frame is forwarded once by every switch on its path);
* training ranks: the generators' CPU per Mb/s a rank sends, and the switches' CPU per
  forwarding of its frames.

Forwarding is measured per kind of load, with that load: what a forwarding costs
depends on how many frames a switch process finds each time it wakes (a paced stream of
large frames, or the small request, reply and acknowledgement of a chain's hop), so one
figure for every frame misjudges both (the first version of the model, with one figure
from paced UDP, estimated 1.5 to 2.2 times the cores the checked runs used).

The estimate places the fabric (:func:`testbed.cluster.placement.place`), routes the
load over shortest paths (split evenly over equal-cost ones), and adds up each
machine's share. A machine holds its share with the fidelity monitor clean when the
estimate leaves it the monitor's idle headroom (10 % of its cores) and no switch
thread needs more than the monitor's 0.9 of a core (the host's ovs-vswitchd forwards
every switch of the machine in one thread; the lab's own processes one thread each).

Not in the model (said in every estimate that has them): workloads other than agents
and training, the tunnels' own CPU (GRE in the kernel), the report and the monitor.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import networkx as nx

from testbed.cluster.placement import Placement, candidates, place
from testbed.core.fidelity import THRESHOLDS
from testbed.fabric import switchd
from topologies.graph import plane_graph
from topologies.spec import FabricSpec

#: the costs measured on the lab's development machine (bench/sizing_bench.py)
COSTS_FILE = Path(__file__).with_name("costs.json")
#: bytes a training frame carries beyond its RoCE payload (Ethernet, IPv4, UDP, BTH, ICRC)
ROCE_OVERHEAD = 14 + 20 + 8 + 12 + 4
MAX_MACHINES = 64


@dataclass(frozen=True)
class Costs:
    """What the lab's parts cost one machine (cores are CPU-seconds per second)."""

    measured_on: str
    process_cores: float
    port_cores: float
    controller_cores_per_switch: float
    chain_cores: float
    chain_fps: float
    chain_forwarding_us: float
    chain_forwarding_us_per_port: float
    rank_cores_per_mbps: float
    rank_forwarding_us: float
    rank_forwarding_us_per_port: float

    @classmethod
    def load(cls, path: Path = COSTS_FILE) -> Costs:
        data = json.loads(Path(path).read_text())
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1) + "\n")


@dataclass
class Load:
    """The load a variant puts on the fabric: the forwardings a second of each switch,
    by kind (chains, training), and the generators' CPU on each host."""

    chain_fwd: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    rank_fwd: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    host_cores: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    not_modelled: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class MachineShare:
    machine: int
    switches: int
    ports: int
    switch_cores: float
    busiest_thread_cores: float
    generator_cores: float
    controller_cores: float = 0.0

    @property
    def cores(self) -> float:
        return self.switch_cores + self.generator_cores + self.controller_cores

    def holds(self, cores: int) -> tuple[bool, str]:
        """Whether a machine of ``cores`` keeps the monitor's headroom, and why not."""
        room = cores * (1 - THRESHOLDS.host_idle_min)
        if self.cores > room:
            return False, f"needs {self.cores:.2f} of {room:.2f} cores (10 % kept idle)"
        if self.busiest_thread_cores > THRESHOLDS.ovs_cores_max:
            return False, (f"a switch thread needs {self.busiest_thread_cores:.2f} cores "
                           f"(more than {THRESHOLDS.ovs_cores_max})")
        return True, ""


@dataclass(frozen=True)
class Estimate:
    machines: int
    cores: int
    placement: Placement
    shares: tuple[MachineShare, ...]
    not_modelled: tuple[str, ...]

    @property
    def holds(self) -> bool:
        return all(s.holds(self.cores)[0] for s in self.shares)

    def to_dict(self) -> dict:
        return {"machines": self.machines, "cores": self.cores, "holds": self.holds,
                "not_modelled": list(self.not_modelled),
                "shares": [{**asdict(s), "cores": round(s.cores, 3),
                            "holds": s.holds(self.cores)[0],
                            "why": s.holds(self.cores)[1]} for s in self.shares],
                "placement": self.placement.to_dict()}


def path_switches(spec: FabricSpec, a: str, b: str, plane: int) -> dict[str, float]:
    """The share of ``a``'s frames to ``b`` (hosts) that each switch of ``plane``
    receives: every switch on a shortest path, split evenly over equal-cost paths.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
    >>> {k[len("tbdoc0p0"):]: v for k, v in
    ...  path_switches(spec, "tbdoc0n0", "tbdoc0n3", 0).items()}
    {'l0': 1.0, 's0': 0.5, 'l1': 1.0, 's1': 0.5}
    """
    src = spec.host(a).interface(plane, 0).switch
    dst = spec.host(b).interface(plane, 0).switch
    if src == dst:
        return {src: 1.0}
    paths = list(nx.all_shortest_paths(plane_graph(spec, plane), src, dst))
    share: dict[str, float] = defaultdict(float)
    for path in paths:
        for sw in path:
            share[sw] += 1 / len(paths)
    return dict(share)


def offered(spec: FabricSpec, variant, costs: Costs) -> Load:
    """The variant's agents and training as frames on each switch and CPU on each host."""
    load = Load()
    hosts = spec.hosts
    agents, training = variant.agents, variant.training
    if agents.get("enabled"):
        driver = hosts[agents["driver"]].name
        services = [hosts[n].name for n in agents["services"].values()]
        conc = agents["concurrency"]
        load.host_cores[driver] += conc * costs.chain_cores / 2
        for svc in services:
            load.host_cores[svc] += conc * costs.chain_cores / 2 / len(services)
        # a chain visits the services in turn: its frames go between the driver and each
        for svc in services:
            for a, b in ((driver, svc), (svc, driver)):
                for sw, s in path_switches(spec, a, b, 0).items():
                    load.chain_fwd[sw] += conc * costs.chain_fps / (2 * len(services)) * s
    if training.get("enabled"):
        ranks = [hosts[n].name for n in training["ranks"]]
        mbps = rank_mbps(training, spec.planes)
        fps = rank_fps(training, spec.planes)
        for i, rank in enumerate(ranks):
            load.host_cores[rank] += mbps * costs.rank_cores_per_mbps
            peer = ranks[(i + 1) % len(ranks)]  # ring; other patterns: the same volume
            for plane in range(spec.planes):
                for sw, s in path_switches(spec, rank, peer, plane).items():
                    load.rank_fwd[sw] += fps * s
        if training.get("pattern", "ring") != "ring":
            load.not_modelled.append(f"training pattern {training['pattern']} (as a ring)")
    for entry in getattr(variant, "workloads", ()):
        load.not_modelled.append(f"workload {entry.get('kind')}")
    return load


def rank_fps(training: dict, planes: int) -> float:
    """Frames a second a rank sends on each plane (on average, as :func:`rank_mbps`)."""
    return rank_mbps(training, planes) * 1e6 / 8 / (training["payload"] + ROCE_OVERHEAD) / planes


def rank_mbps(training: dict, planes: int) -> float:
    """A rank's mean send rate over all its planes: it sends ``bytes`` an iteration at
    ``rate_mbps`` a plane, after ``compute_ms`` without traffic.

    >>> rank_mbps({"bytes": 1_000_000, "rate_mbps": 12, "compute_ms": 40}, 2)
    21.42857142857143
    """
    send_s = training["bytes"] * 8 / (training["rate_mbps"] * 1e6 * planes)
    return training["bytes"] * 8 / 1e6 / (send_s + training["compute_ms"] / 1000)


def estimate(spec: FabricSpec, variant, costs: Costs, *, machines: int,
             cores: int) -> Estimate:
    """Each machine's share of ``variant`` on ``machines`` machines of ``cores``: on the
    placement that cuts the fewest links (:func:`place`), or, when a machine cannot hold
    its share there, on the placement that holds and cuts the fewest."""
    best = _shares(spec, variant, costs, place(spec, machines), cores)
    if best.holds:
        return best
    for option in sorted(candidates(spec, machines), key=lambda p: len(p.cut)):
        est = _shares(spec, variant, costs, option, cores)
        if est.holds:
            return est
    return best


def _shares(spec: FabricSpec, variant, costs: Costs, placement: Placement,
            cores: int) -> Estimate:
    machines = placement.machines
    load = offered(spec, variant, costs)
    settings = switchd.SwitchSettings(**(variant.switches or {}))
    lab = settings.daemon == "lab"
    shard_of = {}
    if lab:
        for i, shard in enumerate(switchd.plan(spec, settings.shards)):
            for name in shard:
                shard_of[name] = i
    shares = []
    for m in range(machines):
        names = set(placement.on(m))
        switches = [sw.name for sw in spec.switches if sw.name in names]
        # a forwarding costs more the more ports its process polls: the machine's switch
        # ports (the host's ovs-vswitchd), or its shard's (the lab's own processes)
        polled = {sw: (sum(placement.ports[o] for o in switches if shard_of[o] == shard_of[sw])
                       if lab else sum(placement.ports[o] for o in switches))
                  for sw in switches}
        own = {sw: placement.ports[sw] * costs.port_cores
               + load.chain_fwd.get(sw, 0.0) * (costs.chain_forwarding_us
                                                + costs.chain_forwarding_us_per_port
                                                * polled[sw]) / 1e6
               + load.rank_fwd.get(sw, 0.0) * (costs.rank_forwarding_us
                                               + costs.rank_forwarding_us_per_port
                                               * polled[sw]) / 1e6
               for sw in switches}
        processes = len({shard_of[s] for s in switches}) if lab else min(1, len(switches))
        switch_cores = processes * costs.process_cores + sum(own.values())
        if lab:
            per: dict[int, float] = defaultdict(float)
            for sw, c in own.items():
                per[shard_of[sw]] += c
            busiest = max(per.values(), default=0.0) + (costs.process_cores if per else 0)
        else:
            busiest = switch_cores
        shares.append(MachineShare(
            machine=m, switches=len(switches),
            ports=sum(placement.ports[s] for s in switches),
            switch_cores=round(switch_cores, 3), busiest_thread_cores=round(busiest, 3),
            generator_cores=round(sum(c for h, c in load.host_cores.items() if h in names),
                                  3),
            controller_cores=round(len(spec.switches) * costs.controller_cores_per_switch, 3)
            if m == 0 else 0.0))
    return Estimate(machines, cores, placement, tuple(shares), tuple(load.not_modelled))


def machines_needed(spec: FabricSpec, variant, costs: Costs, *, cores: int) -> Estimate:
    """The fewest machines of ``cores`` on which every machine holds its share (the
    estimate for :data:`MAX_MACHINES` when none does: a switch thread alone over the
    limit is not helped by more machines)."""
    limit = min(MAX_MACHINES, max(1, len(spec.switches) + len(spec.hosts)))
    last = None
    for n in range(1, limit + 1):
        last = estimate(spec, variant, costs, machines=n, cores=cores)
        if last.holds:
            return last
    return last


def describe(est: Estimate) -> list[str]:
    """Lines for people."""
    verdict = "holds" if est.holds else "does not hold"
    lines = [f"{est.machines} machine{'s' if est.machines > 1 else ''} of {est.cores} "
             f"cores: {verdict} the load with the fidelity monitor clean (estimate)"]
    for s in est.shares:
        ok, why = s.holds(est.cores)
        lines.append(f"  machine {s.machine}: {s.switches} switches, {s.ports} ports; "
                     f"switches {s.switch_cores:.2f} cores (busiest thread "
                     f"{s.busiest_thread_cores:.2f}), generators {s.generator_cores:.2f}"
                     + (f", controller {s.controller_cores:.2f}" if s.controller_cores else "")
                     + "; "
                     f"{'ok' if ok else why}")
    if est.machines > 1:
        p = est.placement
        lines.append(f"  placed by {p.way}: {len(p.cut)} links cut")
        for (a, b), mbps in p.tunnel_mbps().items():
            lines.append(f"    tunnels between machines {a} and {b}: {mbps:g} Mb/s each way")
    if est.not_modelled:
        lines.append("  not in the model (so at least this): " + ", ".join(est.not_modelled))
    return lines
