"""Start the generators of one variant inside the fabric's host namespaces.

Agent services and the chain driver use rail 0 of every plane (a chain picks its plane
from its id); the training ring uses rail 0 of every plane as its channels, so a
collective is spread over all planes the way a multi-plane NIC spreads it.
"""

from __future__ import annotations

import json
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from testbed.errors import BringUpError
from testbed.fabric import Fabric
from testbed.procs import Helper, wait_for
from testbed.scenario import SERVICES, Variant
from topologies.spec import FabricSpec
from traffic.agent_plan import default_plan
from traffic.patterns import destinations

SERVICE_PORT = 7000
TRAFFIC = [sys.executable, "-m", "traffic"]


@dataclass
class Workload:
    """Where one variant's generators write, and the processes that write there."""

    out: Path
    driver: Helper | None = None
    ranks: list[Helper] | None = None
    start_at: float = 0.0  # epoch time at which traffic starts

    @property
    def chains_file(self) -> Path:
        return self.out / "chains.jsonl"

    @property
    def hops_file(self) -> Path:
        return self.out / "hops.jsonl"

    def rank_file(self, rank: int) -> Path:
        return self.out / f"training-rank{rank}.jsonl"


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


def start(fabric: Fabric, variant: Variant, *, out: Path, pid_dir: Path, duration_s: float,
          seed: int, stack: ExitStack) -> Workload:
    """Start services, training ranks and the chain driver; each stop registered on ``stack``."""
    spec = fabric.spec
    work = Workload(out=out)
    agents, training = variant.agents, variant.training

    if agents["enabled"] and agents.get("ecn"):
        enable_tcp_ecn(fabric, [h.name for h in spec.hosts])
    if agents["enabled"]:
        for i, svc in enumerate(SERVICES):
            host = spec.hosts[agents["services"][svc]]
            listen = []
            for p in range(spec.planes):
                listen += ["--listen", f"{host.interface(p, 0).ip}:{SERVICE_PORT + i}"]
            proc = fabric.spawn(
                host.name, f"svc-{svc}",
                [*TRAFFIC, "agent-service", "--role", svc, *listen,
                 "--stats", str(out / f"service-{svc}.json")],
                pid_dir=pid_dir, log=out / f"service-{svc}.log", stdout_pipe=True,
            )
            stack.callback(proc.stop)
            _wait_ready(proc, svc)
        (out / "agent-plan.json").write_text(json.dumps(agent_plan(spec, agents["services"])))

    start_at = work.start_at = time.time() + 3.0  # ranks import Scapy, build templates
    if training["enabled"]:
        config = out / "training.json"
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
        work.driver = fabric.spawn(
            spec.hosts[agents["driver"]].name, "driver",
            [*TRAFFIC, "agent-driver", "--plan", str(out / "agent-plan.json"),
             "--hops-out", str(work.hops_file), "--chains-out", str(work.chains_file),
             "--duration", f"{duration_s:g}", "--concurrency", str(agents["concurrency"]),
             "--timeout-ms", f"{agents['timeout_ms']:g}", "--seed", str(seed),
             *multipath_args(spec, agents)],
            pid_dir=pid_dir, log=out / "driver.log", stdout_file=out / "driver-summary.json",
        )
        stack.callback(work.driver.stop)
    return work


def _wait_ready(proc: Helper, name: str, timeout: float = 15.0) -> None:
    """Block until a service prints ``ready`` (all listeners bound)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.proc.stdout.readline() if proc.alive() else b""
        if line.strip() == b"ready":
            return
        if not line and not proc.alive():
            break
    raise BringUpError(f"agent service {name} did not become ready (see service-{name}.log)")


def wait_done(work: Workload, duration_s: float, progress) -> dict | None:
    """Wait for the driver and ranks to finish; returns the driver's JSON summary."""
    t0 = time.monotonic()
    grace = duration_s + 20
    procs = ([work.driver] if work.driver else []) + (work.ranks or [])
    while any(p.alive() for p in procs) and time.monotonic() - t0 < grace:
        progress(time.monotonic() - t0, _count_lines(work.chains_file))
        wait_for(lambda: not any(p.alive() for p in procs), 2.0, interval=0.1)
    for p in procs:
        if p.alive():
            p.stop()
    summary = work.out / "driver-summary.json"
    if work.driver is None or not summary.exists():
        return None
    lines = [ln for ln in summary.read_text().splitlines() if ln.startswith("{")]
    return json.loads(lines[-1]) if lines else None


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as f:
            return sum(1 for _ in f)
    except FileNotFoundError:
        return 0
