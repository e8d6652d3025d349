"""Start the generators of one fabric variant inside the fabric's host namespaces.

Agent services and the chain driver (:mod:`testbed.chains`, the one launcher every kind
uses) take rail 0 of every plane (a chain picks its plane from its id); the training
ring uses rail 0 of every plane as its channels, so a collective is spread over all
planes the way a multi-plane NIC spreads it.
"""

from __future__ import annotations

import json
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed import chains, layout
from testbed.chains import SERVICE_PORT, SERVICES, TRAFFIC, Service
from testbed.errors import BringUpError
from testbed.fabric import Fabric
from testbed.procs import Helper, wait_for
from topologies.spec import FabricSpec
from traffic.agent_plan import default_plan
from traffic.patterns import destinations

__all__ = ["SERVICE_PORT", "TRAFFIC", "Workload", "agent_plan", "enable_tcp_ecn", "start",
           "training_config", "wait_done"]


@dataclass
class Workload:
    """Where one variant's generators write, and the processes that write there."""

    out: Path
    driver: Helper | None = None
    ranks: list[Helper] | None = None
    start_at: float = 0.0  # epoch time at which traffic starts

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
            "ecn", "cnp_interval_us", "spray", "dcqcn")
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
