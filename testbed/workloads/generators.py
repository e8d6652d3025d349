"""Start the generators of one fabric variant inside the fabric's host namespaces.

Agent services and the chain driver (:mod:`testbed.workloads.chains`, the one launcher every kind
uses) take rail 0 of every plane (a chain picks its plane from its id); the training
ring uses rail 0 of every plane as its channels, so a collective is spread over all
planes the way a multi-plane NIC spreads it.
"""

from __future__ import annotations

import json
import re
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.core import layout
from testbed.errors import BringUpError
from testbed.fabric.net import Fabric
from testbed.faults.schedule import Fault, Schedule
from testbed.host.procs import Helper, python_env, wait_for
from testbed.workloads import chains
from testbed.workloads.chains import SERVICE_PORT, SERVICES, TRAFFIC, Service
from topologies.spec import FabricSpec
from traffic.agent_plan import default_plan
from traffic.patterns import destinations, hedera

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

    @property
    def chains_file(self) -> Path:
        return self.out / layout.CHAINS

    @property
    def hops_file(self) -> Path:
        return self.out / layout.HOPS

    def rank_file(self, rank: int) -> Path:
        return self.out / layout.rank_file(rank)


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
        services = {}
        for svc in SERVICES:
            host = spec.hosts[agents["services"][svc]]
            services[svc] = Service(fabric.host(host.name), [
                host.interface(p, 0).ip for p in range(spec.planes)])
        chains.start_services(services, out=out, pid_dir=pid_dir, stack=stack)

    start_at = work.start_at = time.time() + 3.0  # ranks import Scapy, build templates
    if training["enabled"]:
        config = out / layout.TRAINING_CONFIG
        config.write_text(json.dumps(training_config(spec, training, seed), indent=1))
        work.ranks = []
        for rank, node in enumerate(training["ranks"]):
            proc = fabric.spawn(
                spec.hosts[node].name, f"rank{rank}",
                [*TRAFFIC, "training", "--rank", str(rank), "--config", str(config),
                 "--out", str(work.rank_file(rank)), "--duration", f"{duration_s:g}",
                 "--start-at", f"{start_at:.3f}"],
                pid_dir=pid_dir, log=out / f"training-rank{rank}.log",
            )
            stack.callback(proc.stop)
            work.ranks.append(proc)

    if agents["enabled"]:
        wait_for(lambda: time.time() >= start_at, 5.0, interval=0.01)
        work.driver = chains.start_driver(
            fabric.host(spec.hosts[agents["driver"]].name), out=out, pid_dir=pid_dir,
            duration_s=duration_s, seed=seed, concurrency=agents["concurrency"],
            timeout_ms=agents["timeout_ms"], stack=stack, extra=multipath_args(spec, agents))
    return work


def wait_done(work: Workload, duration_s: float, progress) -> dict | None:
    """Wait for the driver and ranks to finish; returns the driver's JSON summary."""
    t0 = time.monotonic()
    grace = duration_s + 20
    procs = ([work.driver] if work.driver else []) + (work.ranks or [])
    while any(p.alive() for p in procs) and time.monotonic() - t0 < grace:
        progress(time.monotonic() - t0, chains.count_lines(work.chains_file))
        wait_for(lambda: not any(p.alive() for p in procs), 2.0, interval=0.1)
    for p in procs:
        if p.alive():
            p.stop()
    summary = work.out / layout.DRIVER_SUMMARY
    if work.driver is None or not summary.exists():
        return None
    lines = [ln for ln in summary.read_text().splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


# -- the generic workloads list: commands, iperf3 pairs, replays, elephants ---------------
OUTPUT = {"command": "command.out", "iperf3": "iperf3.json", "replay": "replay.json",
          "elephants": "flow0.json"}
PLACEHOLDER = re.compile(r"\{n(\d+)(?:\.p(\d+))?\}")
IPERF_BASE_PORT = 5201
#: elephants entry k, flow i listens on ELEPHANT_BASE_PORT + 1000 k + i
ELEPHANT_BASE_PORT = 20000
#: elephants end this long before the run does by default: iperf3's client learns what
#: its server received only in the exchange after the test, which a stop would cut off
ELEPHANT_MARGIN_S = 2.0


def elephant_label(entry: dict) -> str:
    """The pattern as Hedera's figures name it: stride4, stag(0.2,0.3), rand, randbij,
    hotspot.

    >>> elephant_label({"pattern": "stride", "stride": 4})
    'stride4'
    >>> elephant_label({"pattern": "staggered", "edge_p": 0.5, "pod_p": 0.3})
    'stag(0.5,0.3)'
    """
    p = entry["pattern"]
    if p == "stride":
        return f"stride{entry['stride']}"
    if p == "staggered":
        return f"stag({entry['edge_p']:g},{entry['pod_p']:g})"
    return {"random": "rand", "bijection": "randbij"}.get(p, p)


def elephant_flows(entry: dict, n_hosts: int, seed: int) -> list[tuple[int, int]]:
    """(sender, receiver) node indices of an elephants entry's flows, drawn from ``seed``.

    >>> elephant_flows({"pattern": "stride", "stride": 2, "hosts": [0, 1, 4, 5]}, 8, 1)
    [(0, 4), (1, 5), (4, 0), (5, 1)]
    """
    hosts = entry.get("hosts") or list(range(n_hosts))
    dest = hedera(entry["pattern"], len(hosts), stride=entry.get("stride", 1),
                  edge_hosts=entry.get("edge_hosts", 1), pod_hosts=entry.get("pod_hosts", 1),
                  edge_p=entry.get("edge_p", 0.0), pod_p=entry.get("pod_p", 0.0),
                  hotspots=entry.get("hotspots", 1), hot_flows=entry.get("hot_flows", 1),
                  seed=seed)
    return [(hosts[i], hosts[j]) for i, j in enumerate(dest)]


def expand(arg: str, spec: FabricSpec) -> str:
    """``{n5}`` -> host n5's address on plane 0 (rail 0), ``{n5.p1}`` on plane 1.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", planes=2, nodes=4)
    >>> expand("ping -c1 {n3} {n2.p1}", spec)
    'ping -c1 10.0.0.4 10.1.0.3'
    """
    def address(match: re.Match) -> str:
        node, plane = int(match.group(1)), int(match.group(2) or 0)
        return spec.hosts[node].interface(plane, 0).ip
    return PLACEHOLDER.sub(address, arg)


@dataclass
class Started:
    """One workload entry and the processes that run it."""

    index: int
    entry: dict
    procs: list[Helper] = field(default_factory=list)
    started: float | None = None
    error: str | None = None


class ExtraWorkloads:
    """The ``workloads:`` entries other than agents and training, started on time."""

    def __init__(self, fabric: Fabric, entries: list[dict], *, out: Path, pid_dir: Path,
                 stack: ExitStack, seed: int, duration_s: float) -> None:
        self.fabric, self.out, self.pid_dir, self.stack = fabric, out, pid_dir, stack
        self.seed, self.duration_s = seed, duration_s
        self.items = [Started(i, e) for i, e in enumerate(entries)]
        self.schedule: Schedule | None = None
        #: elephants entries: their flows, (sender, receiver) node indices
        self.flows = {i: elephant_flows(e, len(fabric.spec.hosts), seed)
                      for i, e in enumerate(entries) if e["kind"] == "elephants"}

    def _host(self, index: int):
        return self.fabric.host(self.fabric.spec.hosts[index].name)

    def _spawn(self, item: Started, name: str, host: int, argv: list[str],
               stdout_file: Path | None = None) -> Helper:
        proc = self._host(host).spawn(
            f"wl{item.index}-{name}", argv, pid_dir=self.pid_dir,
            log=self.out / f"workload-{item.index}-{name}.log", env=python_env(),
            stdout_file=stdout_file)
        self.stack.callback(proc.stop)
        item.procs.append(proc)
        return proc

    def start(self, t0: float) -> None:
        """iperf3 servers now; every entry's own process at ``t0 + at_s``."""
        spec = self.fabric.spec
        for item in self.items:
            e = item.entry
            if e["kind"] == "iperf3":
                server = spec.hosts[e["server"]].interface(e["plane"], 0).ip
                self._spawn(item, "server", e["server"],
                            ["iperf3", "-s", "-1", "-B", server, "-p",
                             str(IPERF_BASE_PORT + item.index)])
            for k, (_, dst) in enumerate(self.flows.get(item.index, ())):
                server = spec.hosts[dst].interface(e["plane"], 0).ip
                self._spawn(item, f"flow{k}-server", dst,
                            ["iperf3", "-s", "-1", "-B", server, "-p",
                             str(ELEPHANT_BASE_PORT + 1000 * item.index + k)])
        faults = [Fault(item.entry["at_s"], "start", str(item.index)) for item in self.items]
        self.schedule = Schedule(faults, {"start": lambda i: self._start(self.items[int(i)])})
        self.schedule.start(t0)

    def _start(self, item: Started) -> None:
        e, spec = item.entry, self.fabric.spec
        item.started = time.time()
        if e["kind"] == "command":
            self._spawn(item, "command", e["host"], [expand(a, spec) for a in e["argv"]],
                        stdout_file=self.out / f"workload-{item.index}-command.out")
        elif e["kind"] == "iperf3":
            server = spec.hosts[e["server"]].interface(e["plane"], 0).ip
            client = spec.hosts[e["client"]].interface(e["plane"], 0).ip
            argv = ["iperf3", "-c", server, "-B", client, "-p",
                    str(IPERF_BASE_PORT + item.index), "-t", f"{e['seconds']:g}", "-J",
                    "-P", str(e["parallel"]), "--connect-timeout", "3000"]
            if e["udp"]:
                argv.append("-u")
            if e["rate_mbps"]:
                argv += ["-b", f"{e['rate_mbps']:g}M"]
            self._spawn(item, "client", e["client"], argv,
                        stdout_file=self.out / f"workload-{item.index}-iperf3.json")
        elif e["kind"] == "elephants":
            seconds = e["seconds"] or max(1.0, self.duration_s - e["at_s"] - ELEPHANT_MARGIN_S)
            for k, (src, dst) in enumerate(self.flows[item.index]):
                argv = ["iperf3", "-c", spec.hosts[dst].interface(e["plane"], 0).ip,
                        "-B", spec.hosts[src].interface(e["plane"], 0).ip,
                        "-p", str(ELEPHANT_BASE_PORT + 1000 * item.index + k),
                        "-t", f"{seconds:g}", "-J", "--connect-timeout", "3000"]
                self._spawn(item, f"flow{k}", src, argv,
                            stdout_file=self.out / f"workload-{item.index}-flow{k}.json")
        elif e["kind"] == "replay":
            iface = spec.hosts[e["host"]].interface(e["plane"], e["rail"]).name
            rate = (["--pps", f"{e['pps']:g}"] if e["pps"] else
                    ["--mbps", f"{e['mbps']:g}"] if e["mbps"] else ["--topspeed"])
            self._spawn(item, "replay", e["host"],
                        [*TRAFFIC, "replay", "--iface", iface, "--pcap", e["pcap"],
                         "--loop", str(e["loop"]), *rate],
                        stdout_file=self.out / f"workload-{item.index}-replay.json")

    def wait(self, until: float) -> None:
        """Until every process that ends by itself has ended, or ``until`` (epoch)."""
        def done() -> bool:
            started = all(item.started for item in self.items)
            return started and not any(p.alive() for item in self.items for p in item.procs
                                       if not p.name.endswith("-server"))
        wait_for(lambda: time.time() >= until or done(), max(0.0, until - time.time()) + 1,
                 interval=0.2)

    def stop(self) -> list[dict]:
        """Stop what still runs and return the ``workloads`` records of the run."""
        if self.schedule:
            self.schedule.stop()
            self.schedule.join(5)
        return [self._record(item) for item in self.items]

    def _record(self, item: Started) -> dict:
        e = item.entry
        main = item.procs[-1] if item.procs and item.started else None
        ran_out = main is not None and main.alive()
        code = main.stop() if main is not None else None
        for proc in item.procs[:-1]:
            proc.stop()
        rec = {"index": item.index, "kind": e["kind"], "at_s": e["at_s"],
               "started": item.started is not None,
               "exit_status": None if ran_out else code,
               "stopped_at_end": ran_out}
        rec.update({k: e[k] for k in ("host", "client", "server") if k in e})
        result = self.out / f"workload-{item.index}-{OUTPUT[e['kind']]}"
        if e["kind"] == "iperf3":
            rec["goodput_mbps"] = _iperf3_goodput(result)
        elif e["kind"] == "elephants":
            rec["pattern"] = elephant_label(e)
            rec["flows"] = [
                {"src": src, "dst": dst, "goodput_mbps": _iperf3_goodput(
                    self.out / f"workload-{item.index}-flow{k}.json")}
                for k, (src, dst) in enumerate(self.flows[item.index])]
        elif e["kind"] == "replay":
            rec["replay"] = _last_json(result)
        rec["output"] = result.name
        return rec


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


def _last_json(path: Path) -> dict | None:
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


def _iperf3_goodput(path: Path) -> float | None:
    """The client's received goodput, or None: no result, or a test cut short (its
    ``error``: the server's figures never came back, the 0 it reports is not a rate)."""
    try:
        record = json.loads(path.read_text())
        end = record["end"]
    except (OSError, ValueError, KeyError):
        return None
    if record.get("error"):
        return None
    summary = end.get("sum_received") or end.get("sum") or {}
    bps = summary.get("bits_per_second")
    return round(bps / 1e6, 3) if bps is not None else None
