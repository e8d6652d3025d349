"""Start the generators of one fabric variant inside the fabric's host namespaces.

Agent services and the chain driver (:mod:`testbed.workloads.chains`, the one launcher every kind
uses) take rail 0 of every plane (a chain picks its plane from its id); the training
ring uses rail 0 of every plane as its channels, so a collective is spread over all
planes the way a multi-plane NIC spreads it.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.core import layout
from testbed.errors import BringUpError
from testbed.fabric.net import Fabric
from testbed.host.procs import Helper, wait_for
from testbed.workloads import chains
from testbed.workloads.chains import SERVICE_PORT, SERVICES, TRAFFIC, Service
from topologies.spec import FabricSpec
from traffic.agent_plan import default_plan
from traffic.patterns import destinations

__all__ = ["SERVICE_PORT", "TRAFFIC", "Workload", "agent_plan", "congctl_route",
           "enable_tcp_ecn", "set_congestion_control", "start", "training_config", "wait_done"]

#: route metrics that ``ip -j route`` names as ``ip route`` takes them, whole numbers in
#: the same unit both ways: :func:`congctl_route` carries them over
ROUTE_METRICS = ("mtu", "advmss", "window", "cwnd", "initcwnd", "initrwnd", "reordering",
                 "hoplimit", "ssthresh", "quickack", "fastopen_no_cookie")


@dataclass
class Workload:
    """Where one variant's generators write, and the processes that write there."""

    out: Path
    driver: Helper | None = None
    ranks: list[Helper] | None = None
    start_at: float = 0.0  # epoch time at which traffic starts
    #: the hosts' TCP congestion control: the one set on their routes, else their default
    congestion_control: str = "default"
    #: the training job is being started again (a node replaced): its ranks are not done
    restarting: bool = False

    @property
    def chains_file(self) -> Path:
        return self.out / layout.CHAINS

    @property
    def hops_file(self) -> Path:
        return self.out / layout.HOPS

    def rank_file(self, rank: int) -> Path:
        return self.out / layout.rank_file(rank)


def roles_by_node(agents: dict, training: dict) -> dict[int, list[str]]:
    """What each node with a role does: ``driver``, a service's name, ``rankN``.

    >>> roles_by_node({"enabled": True, "driver": 0, "services": {"tool": 2, "agent": 0}},
    ...               {"enabled": True, "ranks": [2, 3]})
    {0: ['driver', 'agent'], 2: ['tool', 'rank0'], 3: ['rank1']}
    """
    roles: dict[int, list[str]] = {}
    if agents.get("enabled"):
        roles.setdefault(agents["driver"], []).append("driver")
        for role, node in agents["services"].items():
            roles.setdefault(node, []).append(role)
    if training.get("enabled"):
        for rank, node in enumerate(training["ranks"]):
            roles.setdefault(node, []).append(f"rank{rank}")
    return roles


def service_on(fabric: Fabric, node: int) -> Service:
    """Where a service runs on node ``node``: its host, its address on every plane (rail 0)."""
    host = fabric.spec.hosts[node]
    return Service(fabric.host(host.name),
                   [host.interface(p, 0).ip for p in range(fabric.spec.planes)])


def agent_plan(spec: FabricSpec, services: dict[str, int]) -> dict:
    """The driver's plan: each service's address on every plane (rail 0)."""
    addresses = {}
    for i, svc in enumerate(SERVICES):
        host = spec.hosts[services[svc]]
        addresses[svc] = [(host.interface(p, 0).ip, SERVICE_PORT + i) for p in range(spec.planes)]
    return default_plan(addresses)


def training_config(spec: FabricSpec, params: dict, seed: int = 1) -> dict:
    """The all-reduce config every rank reads: sizes, rates, each rank's channels, who
    sends to whom (the pattern, drawn from ``seed`` if random) and congestion control."""
    ranks = []
    for node in params["ranks"]:
        host = spec.hosts[node]
        ranks.append({"channels": [
            {"iface": i.name, "ip": i.ip, "mac": i.mac}
            for i in (host.interface(p, 0) for p in range(spec.planes))
        ]})
    keys = ("bytes", "compute_ms", "rate_mbps", "step_timeout_ms", "payload",
            "ecn", "cnp_interval_us", "spray", "qps", "dcqcn")
    send_to = destinations(params.get("pattern", "ring"), len(ranks),
                           stride=params.get("stride") or None, seed=seed)
    return {**{k: params[k] for k in keys if k in params}, "ranks": ranks,
            "pattern": params.get("pattern", "ring"), "send_to": send_to,
            "multipath": bool(params.get("multipath"))}


def enable_tcp_ecn(fabric: Fabric, hosts: list[str]) -> None:
    """Turn on ECN for TCP (``net.ipv4.tcp_ecn=1``) inside each host's namespace."""
    for host in hosts:
        done = fabric.run(host, ["sysctl", "-qw", "net.ipv4.tcp_ecn=1"])
        if done.returncode != 0:
            raise BringUpError(f"{host}: cannot enable TCP ECN: {done.stderr.strip()}")


def congctl_route(route: dict, algorithm: str) -> list[str]:
    """``ip route replace`` that gives a route (as ``ip -j route`` shows it) the TCP
    congestion control ``algorithm``, its other attributes kept; ValueError for one this
    cannot carry over (a multipath route, a metric not in ROUTE_METRICS).

    >>> congctl_route({"dst": "10.0.0.0/24", "dev": "tb1n0p0r0", "protocol": "kernel",
    ...                "scope": "link", "prefsrc": "10.0.0.1", "flags": []}, "dctcp")
    ... # doctest: +NORMALIZE_WHITESPACE
    ['ip', 'route', 'replace', '10.0.0.0/24', 'dev', 'tb1n0p0r0', 'proto', 'kernel',
     'scope', 'link', 'src', '10.0.0.1', 'congctl', 'dctcp']
    """
    if "nexthops" in route:
        raise ValueError("a multipath route")
    argv = ["ip", "route", "replace", route["dst"]]
    for key, word in (("gateway", "via"), ("dev", "dev"), ("protocol", "proto"),
                      ("scope", "scope"), ("prefsrc", "src"), ("metric", "metric")):
        if key in route:
            argv += [word, str(route[key])]
    if "onlink" in route.get("flags", ()):
        argv.append("onlink")
    for metrics in route.get("metrics", ()):
        for name, value in metrics.items():
            if name == "congestion":
                continue
            if name not in ROUTE_METRICS or not isinstance(value, int):
                raise ValueError(f"route metric {name} {value}")
            argv += [name, str(value)]
    return [*argv, "congctl", algorithm]


def set_congestion_control(fabric: Fabric, hosts: list[str], algorithm: str) -> None:
    """Every TCP socket in each host's namespace uses ``algorithm``: each IPv4 route of
    the host gets it as its ``congctl``, so clients and listeners alike (both ends of a
    DCTCP connection must run it to negotiate ECN). Not the sysctl: a namespace may only
    default to one of tcp_allowed_congestion_control, which is host-wide (dctcp: EPERM)."""
    for host in hosts:
        done = fabric.run(host, ["ip", "-j", "-4", "route", "show", "table", "main"])
        if done.returncode:
            raise BringUpError(f"{host}: cannot list its routes: {done.stderr.strip()}")
        for route in json.loads(done.stdout or "[]"):
            if route.get("type", "unicast") != "unicast":
                continue  # blackhole, unreachable...: no TCP leaves by them
            try:
                argv = congctl_route(route, algorithm)
            except ValueError as exc:
                raise BringUpError(f"{host}: route {route.get('dst')}: cannot carry over "
                                   f"{exc} to set TCP congestion control") from None
            done = fabric.run(host, argv)
            if done.returncode:
                raise BringUpError(f"{host}: cannot set TCP congestion control {algorithm} "
                                   f"on route {route['dst']}: {done.stderr.strip()}")


def host_congestion_control(fabric: Fabric, host: str) -> str:
    """The congestion control a host's namespace gives sockets by default (its sysctl)."""
    done = fabric.run(host, ["sysctl", "-n", "net.ipv4.tcp_congestion_control"])
    return done.stdout.strip() if done.returncode == 0 else "default"


def multipath_args(spec: FabricSpec, agents: dict) -> list[str]:
    """Driver options for host multipath: its interface on every plane (rail 0)."""
    if not agents.get("multipath"):
        return []
    host = spec.hosts[agents["driver"]]
    ifaces = ",".join(host.interface(p, 0).name for p in range(spec.planes))
    return ["--multipath", ifaces, "--attempt-ms", f"{agents['attempt_ms']:g}"]


#: how long training ranks may take to get ready (Scapy's import alone takes seconds in
#: the emulated lab VM)
RANKS_READY_TIMEOUT_S = 120.0
#: from the start time's writing to the start: every rank reads it first (5 ms polls)
START_MARGIN_S = 0.2


def start(fabric: Fabric, variant: Any, *, out: Path, pid_dir: Path, duration_s: float,
          seed: int, stack: ExitStack) -> Workload:
    """Start services, training ranks and the chain driver; each stop registered on ``stack``."""
    spec = fabric.spec
    work = Workload(out=out)
    agents, training = variant.agents, variant.training

    if agents["enabled"] and agents.get("ecn"):
        enable_tcp_ecn(fabric, [h.name for h in spec.hosts])
    # every TCP socket in the hosts (the workloads' iperf3 too), agents enabled or not
    algorithm = agents.get("congestion_control", "default")
    if algorithm != "default":
        set_congestion_control(fabric, [h.name for h in spec.hosts], algorithm)
        work.congestion_control = algorithm
    else:
        work.congestion_control = host_congestion_control(fabric, spec.hosts[0].name)
    if agents["enabled"]:
        services = {svc: service_on(fabric, agents["services"][svc]) for svc in SERVICES}
        chains.start_services(services, out=out, pid_dir=pid_dir, stack=stack)

    start_at = time.time()  # the services listen already
    if training["enabled"]:
        work.ranks, start_at = start_ranks(fabric, training, out=out, pid_dir=pid_dir,
                                           duration_s=duration_s, seed=seed, stack=stack)
    work.start_at = start_at

    if agents["enabled"]:
        wait_for(lambda: time.time() >= start_at, 5.0, interval=0.01)
        work.driver = chains.start_driver(
            fabric.host(spec.hosts[agents["driver"]].name), out=out, pid_dir=pid_dir,
            duration_s=duration_s, seed=seed, concurrency=agents["concurrency"],
            timeout_ms=agents["timeout_ms"], stack=stack, extra=multipath_args(spec, agents))
    return work


def start_ranks(fabric: Fabric, training: dict, *, out: Path, pid_dir: Path,
                duration_s: float, seed: int, stack: ExitStack, first_iteration: int = 0,
                cancel: threading.Event | None = None) -> tuple[list[Helper], float]:
    """Start every rank of ``training`` (its config written first) and, once all are
    ready, their common start time; returns the ranks and that time. ``first_iteration``:
    a job restarted on a new rank list numbers its iterations on (each rank appends to
    its file). ``cancel``: set, the wait for the ranks ends (BringUpError)."""
    spec = fabric.spec
    config = out / layout.TRAINING_CONFIG
    config.write_text(json.dumps(training_config(spec, training, seed), indent=1))
    ranks = []
    start_file = pid_dir / "training.start"
    start_file.unlink(missing_ok=True)
    ready = [pid_dir / f"rank{rank}.ready" for rank in range(len(training["ranks"]))]
    for rank, node in enumerate(training["ranks"]):
        ready[rank].unlink(missing_ok=True)
        proc = fabric.spawn(
            spec.hosts[node].name, f"rank{rank}",
            [*TRAFFIC, "training", "--rank", str(rank), "--config", str(config),
             "--out", str(out / layout.rank_file(rank)), "--duration", f"{duration_s:g}",
             "--ready-file", str(ready[rank]), "--start-file", str(start_file),
             "--first-iteration", str(first_iteration)],
            pid_dir=pid_dir, log=out / layout.rank_log(rank),
        )
        stack.callback(proc.stop)
        ranks.append(proc)
    # every rank starts at one time, chosen once all are ready (Scapy imported, frames
    # built: about a second here, ten times that under software emulation); a rank
    # that died is not waited for (its log says why; the run reports it)
    wait_for(lambda: all(f.exists() or not p.alive()
                         for f, p in zip(ready, ranks, strict=True))
             or (cancel is not None and cancel.is_set()),
             RANKS_READY_TIMEOUT_S, interval=0.02)
    if cancel is not None and cancel.is_set():
        raise BringUpError("the run ended while the training ranks got ready")
    start_at = time.time() + START_MARGIN_S
    tmp = start_file.with_suffix(".tmp")
    tmp.write_text(f"{start_at:.6f}")
    tmp.replace(start_file)
    return ranks, start_at


def wait_done(work: Workload, duration_s: float, progress) -> dict | None:
    """Wait for the driver and ranks to finish; returns the driver's JSON summary."""
    t0 = time.monotonic()
    grace = duration_s + 20
    def procs() -> list[Helper]:  # the ranks may be started again (a node replaced)
        return ([work.driver] if work.driver else []) + list(work.ranks or [])
    def running() -> bool:
        return work.restarting or any(p.alive() for p in procs())
    while running() and time.monotonic() - t0 < grace:
        progress(time.monotonic() - t0, chains.count_lines(work.chains_file))
        wait_for(lambda: not running(), 2.0, interval=0.1)
    for p in procs():
        if p.alive():
            p.stop()
    summary = work.out / layout.DRIVER_SUMMARY
    if work.driver is None or not summary.exists():
        return None
    lines = [ln for ln in summary.read_text().splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def elephants_summary(records: list[dict], link_mbps: float) -> dict:
    """The run's elephants in one figure: their aggregate goodput (the bisection
    bandwidth the fabric gave that pattern), against what the hosts' NICs allow.

    >>> recs = [{"kind": "elephants", "pattern": "stride4",
    ...          "flows": [{"goodput_mbps": 9.0}, {"goodput_mbps": 19.0}]}]
    >>> elephants_summary(recs, 20)  # doctest: +NORMALIZE_WHITESPACE
    {'pattern': 'stride4', 'flows': 2, 'measured': 2, 'aggregate_mbps': 28.0,
     'per_flow_mbps': {'min': 9.0, 'max': 19.0}, 'of_nics': 0.7}
    """
    flows = [f for r in records if r["kind"] == "elephants" for f in r["flows"]]
    rates = [f["goodput_mbps"] for f in flows if f["goodput_mbps"] is not None]
    total = round(sum(rates), 3)
    return {"pattern": next(r["pattern"] for r in records if r["kind"] == "elephants"),
            "flows": len(flows), "measured": len(rates), "aggregate_mbps": total,
            "per_flow_mbps": {"min": min(rates, default=None), "max": max(rates, default=None)},
            "of_nics": round(total / (len(flows) * link_mbps), 3) if flows else None}
