"""How many machines a fabric and its load need, from what the parts cost on one.

The lab's work on a machine is, to a first order, these parts, each measured on a
machine by ``make bench BENCH=sizing`` (:mod:`bench.sizing_bench`) into a
:class:`Costs` file:

* switch processes awake with nothing to forward: a constant per process and a cost
  per port it polls, and the controller asking every switch for its statistics (on the
  first machine, where it runs);
* a frame that enters a switch process wakes it (a cost that grows with the ports the
  process polls: the userspace datapath polls every port each time it wakes,
  docs/switches.md), unless the process is awake already: frames that arrive while it
  works are handled in the same round, so a process that enters ``F`` frames a second
  at ``c`` seconds a wake-up wakes ``F / (1 + F c)`` times a second (its wake-ups alone
  never take more than its one thread); every switch of the process on the frame's path
  then forwards it (a cost per switch; the process finds it on the next port in the same
  round);
* agent chains are a closed loop: a chain sends its next frame when the last came
  back, so the frames a chain in flight sends a second follow from the time a frame
  takes, which grows with the switches on its path and the ports of their process; and
  each frame costs its two hosts (the generators and the kernel's work on the frame);
* training ranks send at their paced rate (:func:`rank_mbps`), each frame with its own
  wake-up, forwarding and host costs (4 KB frames, not a chain's small ones).

The estimate places the fabric (:func:`testbed.cluster.placement.place`), routes the
load over shortest paths (split evenly over equal-cost ones), and adds up each
machine's share. A machine holds its share with the fidelity monitor clean when the
estimate leaves it the monitor's idle headroom (10 % of its cores) and no switch
thread needs more than the monitor's 0.9 of a core (the host's ovs-vswitchd forwards
every switch of the machine in one thread; the lab's own processes one thread each).

Not in the model (said in every estimate that has them): workloads other than agents
and training, the tunnels' own CPU and delay (GRE in the kernel, the machines'
network), the report and the monitor.
"""

from __future__ import annotations

import json
import statistics
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path

import networkx as nx

from testbed.cluster.placement import Placement, best_of, candidates
from testbed.core.fidelity_verdict import THRESHOLDS
from testbed.fabric import switchd
from topologies.graph import plane_graph
from topologies.spec import FabricSpec
from traffic.roce import OVERHEAD as ROCE_OVERHEAD

#: the costs measured on the lab's development machine (bench/sizing_bench.py)
COSTS_FILE = Path(__file__).with_name("costs.json")
MAX_MACHINES = 64
#: the error the estimate is held to: its busy cores within this share of a checked
#: run's measured median (bench/sizing_bench.py's target; docs/machines.md gives how far
#: it was off); ``testbed run --fit`` raises every need by it, as a margin
ERROR = 0.25


@dataclass(frozen=True)
class Costs:
    """What the lab's parts cost one machine: cores are CPU-seconds a second, us CPU
    microseconds; ``*_per_port`` grows with the ports of the switch process."""

    measured_on: str
    process_cores: float
    port_cores: float
    controller_cores_per_switch: float
    chain_wake_us: float
    chain_wake_us_per_port: float
    chain_forwarding_us: float
    chain_host_us: float
    chain_frame_ms: float
    chain_frame_ms_per_switch: float
    chain_frame_ms_per_port: float
    rank_wake_us: float
    rank_wake_us_per_port: float
    rank_forwarding_us: float
    rank_host_us: float

    @property
    def datapath(self) -> str:
        """The Open vSwitch datapath the costs were measured on (as ``measured_on`` names
        it, :func:`testbed.host.capabilities.machine`)."""
        return "kernel" if "kernel datapath" in self.measured_on else "userspace"

    @classmethod
    def load(cls, path: Path = COSTS_FILE) -> Costs:
        data = json.loads(Path(path).read_text())
        return cls(**{k: data[k] for k in cls.__dataclass_fields__})

    def save(self, path: Path) -> None:
        Path(path).write_text(json.dumps(asdict(self), indent=1) + "\n")

    def frame_s(self, switches: float, ports: float) -> float:
        """The time one chain's frame takes on a path of ``switches`` in a process of
        ``ports`` (a chain in flight sends one a frame time)."""
        return max(1e-5, (self.chain_frame_ms + self.chain_frame_ms_per_switch * switches
                          + self.chain_frame_ms_per_port * ports) / 1000)


@dataclass(frozen=True)
class Flow:
    """Frames a second between two hosts on one plane, of a kind (``chain``, ``rank``)."""

    src: str
    dst: str
    plane: int
    fps: float
    kind: str


@dataclass
class Load:
    """What a variant sends (flows of frames between hosts) and what else it runs."""

    flows: list[Flow] = field(default_factory=list)
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

    def holds(self, cores: float, margin: float = 0.0) -> tuple[bool, str]:
        """Whether a machine of ``cores`` keeps the monitor's headroom, and why not;
        ``margin``: every need raised by this share first (the model's error)."""
        room = cores * (1 - THRESHOLDS.host_idle_min)
        raised = 1 + margin
        with_margin = f" with a {margin * 100:g} % margin" if margin else ""
        if self.cores * raised > room:
            return False, (f"needs {self.cores * raised:.2f} of {room:.2f} cores (10 % kept "
                           f"idle){with_margin}")
        if self.busiest_thread_cores * raised > THRESHOLDS.ovs_cores_max:
            return False, (f"a switch thread needs {self.busiest_thread_cores * raised:.2f} "
                           f"cores (more than {THRESHOLDS.ovs_cores_max}){with_margin}")
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


def paths(spec: FabricSpec, a: str, b: str, plane: int) -> list[list[str]]:
    """The switches of every shortest path from host ``a`` to host ``b`` on ``plane``
    (ECMP spreads frames evenly over them).

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
    >>> [[s[len("tbdoc0p0"):] for s in p] for p in paths(spec, "tbdoc0n0", "tbdoc0n3", 0)]
    [['l0', 's0', 'l1'], ['l0', 's1', 'l1']]
    """
    src = spec.host(a).interface(plane, 0).switch
    dst = spec.host(b).interface(plane, 0).switch
    if src == dst:
        return [[src]]
    key = (id(spec), plane, src, dst)
    cached = _PATHS.get(key)
    if cached is None or cached[0] is not spec:
        if len(_PATHS) > 4096:
            _PATHS.clear()
        found = [list(p) for p in nx.all_shortest_paths(plane_graph(spec, plane), src, dst)]
        cached = _PATHS[key] = (spec, found)
    return cached[1]


#: shortest paths by (spec, plane, from switch, to switch), the spec kept to check its id
_PATHS: dict[tuple, tuple[FabricSpec, list[list[str]]]] = {}


def path_switches(spec: FabricSpec, a: str, b: str, plane: int) -> float:
    """The switches a frame from ``a`` to ``b`` crosses.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
    >>> path_switches(spec, "tbdoc0n0", "tbdoc0n1", 0), path_switches(spec, "tbdoc0n0",
    ...                                                               "tbdoc0n3", 0)
    (1.0, 3.0)
    """
    found = paths(spec, a, b, plane)
    return sum(len(p) for p in found) / len(found)


def offered(spec: FabricSpec, variant, costs: Costs, ports: float) -> Load:
    """The variant's agents and training as flows of frames; ``ports``: those of the
    switch process a chain's frames cross (what their time depends on)."""
    load = Load()
    hosts = spec.hosts
    agents, training = variant.agents, variant.training
    if agents.get("enabled"):
        driver = hosts[agents["driver"]].name
        services = [hosts[n].name for n in agents["services"].values()]
        # a chain visits the services in turn, as many frames each way on every hop: its
        # frame rate is one over the mean frame time of its hops
        times = [costs.frame_s(path_switches(spec, driver, svc, 0), ports) for svc in services]
        fps = agents["concurrency"] / statistics.mean(times)
        for svc in services:
            for a, b in ((driver, svc), (svc, driver)):
                load.flows.append(Flow(a, b, 0, fps / (2 * len(services)), "chain"))
    if training.get("enabled"):
        ranks = [hosts[n].name for n in training["ranks"]]
        fps = rank_fps(training, spec.planes)
        for i, rank in enumerate(ranks):
            peer = ranks[(i + 1) % len(ranks)]  # ring; other patterns: the same volume
            for plane in range(spec.planes):
                load.flows.append(Flow(rank, peer, plane, fps, "rank"))
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
    options = candidates(spec, machines)
    first = best_of(spec, machines, options)
    best = _shares(spec, variant, costs, first, cores)
    if best.holds:
        return best
    for option in sorted(options, key=lambda p: len(p.cut)):
        if option is first:
            continue
        est = _shares(spec, variant, costs, option, cores)
        if est.holds:
            return est
    return best


def _shares(spec: FabricSpec, variant, costs: Costs, placement: Placement,
            cores: int) -> Estimate:
    machines = placement.machines
    settings = switchd.SwitchSettings(**(variant.switches or {}))
    lab = settings.daemon == "lab"
    # the switch process of every switch: the machine's one ovs-vswitchd, or its shard
    process: dict[str, tuple] = {}
    shards = switchd.plan(spec, settings.shards) if lab else []
    for sw in spec.switches:
        m = placement.where[sw.name]
        process[sw.name] = (m, next(i for i, sh in enumerate(shards) if sw.name in sh)) \
            if lab else (m,)
    polled: dict[tuple, int] = defaultdict(int)
    for sw, key in process.items():
        polled[key] += placement.ports[sw]
    busiest_process = max(polled.values(), default=0)
    load = offered(spec, variant, costs, busiest_process)
    switch_cpu: dict[tuple, float] = defaultdict(float)
    entering: dict[tuple, float] = defaultdict(float)  # frames a second into a process
    wake_s: dict[tuple, float] = defaultdict(float)  # their wake-up CPU, summed (s/s)
    host_cpu: dict[int, float] = defaultdict(float)
    for flow in load.flows:
        wake, per_port, fwd, host = (
            (costs.chain_wake_us, costs.chain_wake_us_per_port, costs.chain_forwarding_us,
             costs.chain_host_us) if flow.kind == "chain" else
            (costs.rank_wake_us, costs.rank_wake_us_per_port, costs.rank_forwarding_us,
             costs.rank_host_us))
        found = paths(spec, flow.src, flow.dst, flow.plane)
        for path in found:
            fps = flow.fps / len(found)
            entered = list(dict.fromkeys(process[sw] for sw in path))
            for key in entered:  # a wake-up of each process the frame enters
                entering[key] += fps
                wake_s[key] += fps * (wake + per_port * polled[key]) / 1e6
            for sw in path:
                switch_cpu[process[sw]] += fps * fwd / 1e6
        for h in (flow.src, flow.dst):  # the sender's and the receiver's work
            host_cpu[placement.where[h]] += flow.fps * host / 2 / 1e6
    for key, fps in entering.items():
        switch_cpu[key] += batched(fps, wake_s[key] / fps)
    shares = []
    for m in range(machines):
        mine = [k for k in polled if k[0] == m]
        idle = {k: costs.process_cores + polled[k] * costs.port_cores for k in mine}
        busy = {k: idle[k] + switch_cpu.get(k, 0.0) for k in mine}
        total = sum(busy.values())
        shares.append(MachineShare(
            machine=m, switches=sum(1 for k in process.values() if k[0] == m),
            ports=sum(polled[k] for k in mine), switch_cores=round(total, 3),
            busiest_thread_cores=round(max(busy.values(), default=0.0), 3),
            generator_cores=round(host_cpu.get(m, 0.0), 3),
            controller_cores=round(len(spec.switches) * costs.controller_cores_per_switch, 3)
            if m == 0 else 0.0))
    return Estimate(machines, cores, placement, tuple(shares), tuple(load.not_modelled))


def batched(fps: float, wake_s: float) -> float:
    """The cores of a process's wake-ups when ``fps`` frames a second enter it and a
    wake-up takes ``wake_s``: frames that arrive during a wake-up share it.

    >>> [round(batched(fps, 100e-6), 3) for fps in (1000, 8000, 1e7)]
    [0.091, 0.444, 0.999]
    """
    load = fps * wake_s
    return load / (1 + load)


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
