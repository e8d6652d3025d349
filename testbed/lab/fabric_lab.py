"""A fabric that stays up: the variant's fabric and controller (:func:`testbed.fabric.bringup.
bring_up`), optionally its workloads, its scenario captures, and the fault actions of
:class:`testbed.faults.fabric.FabricFaults` applied by hand."""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from testbed.cluster.servers import parse_all
from testbed.core import layout
from testbed.errors import ConfigError
from testbed.fabric.bringup import LiveFabric, bring_up
from testbed.faults import kinds as fault_kinds
from testbed.faults.fabric import FabricFaults, needs, parse_faults
from testbed.host.capabilities import probe
from testbed.host.hosts import Host, RootHost
from testbed.host.naming import run_prefix
from testbed.lab import capture, mncli, state
from testbed.monitor import launch as monitor
from testbed.workloads import generators
from topologies.spec import FabricSpec

Progress = Callable[[str], None]


class FabricLab:
    KIND = "fabric"
    #: what ``testbed up`` and ``inspect`` call its nodes
    NODES = "hosts"

    def __init__(self, scenario, variant, *, run_id: str, name: str, out: Path,
                 stack: ExitStack, progress: Progress) -> None:
        self.scenario, self.variant = scenario, variant
        self.run_id, self.name, self.out = run_id, name, out
        self.stack, self.progress = stack, progress
        self.live: LiveFabric | None = None
        self.faults: FabricFaults | None = None
        self.cli: mncli.Sessions | None = None
        self.pcaps: list[Path] = []
        self.traffic: str | None = None
        self.watched: monitor.Watched | None = None
        self.acceptance: dict | None = None  # the acceptance step's record, if it ran
        #: the other machines the fabric is spread over (``[user@]host[:port]``)
        self.servers: list[str] = []

    @property
    def spec(self):
        assert self.live is not None
        return self.live.spec

    def start(self, *, traffic: bool, duration_s: float, monitor_port: int | str = "auto",
              with_prometheus: bool = False) -> None:
        caps = self.caps = probe(self.run_id)
        spec = self.variant.fabric(run_prefix(self.run_id))
        self.progress(f"{self.name}: starting fabric ({spec.planes} planes, "
                      f"{len(spec.switches)} switches, {len(spec.hosts)} hosts, "
                      f"{len(spec.links)} links) and its controller")
        controller = self.variant.controller
        if self.servers:
            self.progress(f"{self.name}: over {len(self.servers) + 1} machines: here, "
                          f"{', '.join(self.servers)} (checking them first)")
        self.live = live = bring_up(
            spec, caps, run_id=self.run_id, controller=controller, out=self.out,
            stack=self.stack, seed=self.scenario.seed, qos=self.variant.qos,
            switches=self.variant.switches, servers=parse_all(self.servers))
        self.progress(f"{self.name}: fabric up in {live.times.start_s:.2f} s, every plane "
                      "reachable")
        if live.metrics_url:
            self.progress(f"{self.name}: Prometheus metrics at {live.metrics_url}")
        net = live.fabric.net
        mncli.sync_addresses(net, spec)
        mncli.add_short_names(net, spec.prefix)
        self.cli = mncli.Sessions(net, self.name, spec.prefix)
        self.faults = FabricFaults(live, self.stack)
        accept = self.variant.acceptance
        if accept.get("enabled") or accept.get("plant"):  # as a run does, before traffic
            from testbed.acceptance.step import run_step

            self.acceptance, agents, training = run_step(
                live, accept, seed=self.scenario.seed, out=self.out, stack=self.stack,
                name=self.name, agents=self.variant.agents, training=self.variant.training,
                progress=self.progress)
            self.variant = dataclasses.replace(self.variant, agents=agents, training=training)
        self.pcaps = capture.start_all(live.fabric, self.variant.capture, out=self.out,
                                       pid_dir=live.pid_dir, stack=self.stack)
        self.watched = monitor.watch(
            spec_file=self.out / layout.SPEC, out=self.out, pid_dir=live.pid_dir,
            stack=self.stack, name=self.name, port=monitor_port,
            with_prometheus=with_prometheus, controller_metrics=live.metrics_url,
            progress=self.progress)
        if traffic:
            self._traffic(duration_s)

    def _traffic(self, duration_s: float) -> None:
        agents, training = self.variant.agents, self.variant.training
        if not (agents["enabled"] or training["enabled"]):
            self.traffic = "none (the variant enables neither agents nor training)"
            return
        live = self.live
        work = generators.start(live.fabric, self.variant, out=self.out, pid_dir=live.pid_dir,
                               duration_s=duration_s, seed=self.scenario.seed,
                               stack=self.stack)
        kinds = [k for k, on in (("agent chains", agents["enabled"]),
                                 ("training", training["enabled"])) if on]
        self.traffic = (f"{' and '.join(kinds)} for {duration_s:g} s from "
                        f"{time.strftime('%H:%M:%S', time.localtime(work.start_at))}")

    # -- what `testbed up` prints and lab.json records ---------------------------------
    def hosts(self) -> dict[str, dict]:
        spec, fabric = self.spec, self.live.fabric
        out = {}
        for host in spec.hosts:
            out[host.name[len(spec.prefix):]] = {
                "name": host.name, **fabric.host_record(host.name),
                "addresses": [f"{i.name[len(spec.prefix):]} {i.ip}/{i.prefixlen}"
                              for i in host.interfaces]}
        return out

    def record(self) -> dict:
        spec, live = self.spec, self.live
        return {"size": spec.counts(), "prefix": spec.prefix, "servers": self.servers,
                "spec": str(self.out / layout.SPEC),
                "switches": [s.name[len(spec.prefix):] for s in spec.switches],
                # what ovs-ofctl is given for each switch (the live checks read its flows)
                "ofctl": {s.name[len(spec.prefix):]: live.fabric.ofctl_target(s.name)
                          for s in spec.switches},
                "controller": ({"pid": live.controller.pid,
                                "openflow": f"tcp:127.0.0.1:{live.fabric.controller_port}",
                                "metrics": live.metrics_url,
                                "log": str(self.out / layout.CONTROLLER_LOG)}
                               if live.controller else
                               {"remote": self.variant.controller["remote"]}),
                "captures": [str(p) for p in self.pcaps], "traffic": self.traffic,
                "monitor": self.watched.monitor.record() if self.watched else None,
                "prometheus": (self.watched.prometheus.record()
                               if self.watched and self.watched.prometheus else None),
                # the scenario's acceptance step, when it ran before the lab was handed over
                "acceptance": ({k: self.acceptance[k] for k in (
                    "planted", "accepted", "excluded_links", "excluded_nodes", "moved")
                    if k in self.acceptance} if self.acceptance else None)}

    def examples(self, lab: str) -> list[str]:
        spec = self.spec
        a, b = spec.hosts[0], spec.hosts[-1]
        sa, sb = a.name[len(spec.prefix):], b.name[len(spec.prefix):]
        port = next(lk for lk in spec.links if lk.kind == "fabric")
        host_link = next(lk for lk in spec.links if lk.kind == "host" and lk.a == a.name)
        short = lambda n: n[len(spec.prefix):]  # noqa: E731
        return [f"testbed exec {lab} {sa} -- ping -c3 {b.interface(0, 0).ip}",
                f"testbed exec {lab} {sa}                      # a shell in {sa}",
                f"testbed cli {lab}                             # Mininet's CLI: pingall, "
                f"{sa} ping -c1 {sb}, link {short(port.a)} {short(port.b)} down",
                f"testbed fault {lab} link_down {short(host_link.a)}-{short(host_link.b)}"
                f"   # then link_up; rail_fail, switch_fail, plane_fail, degrade --loss, "
                "controller_kill ...",
                f"testbed capture {lab} {short(port.a_intf)} --seconds 5",
                f"ovs-ofctl -O OpenFlow13 dump-flows {self.live.fabric.ofctl_target(port.a)}",
                f"testbed down {lab}"]

    # -- what the lab commands read from a lab's record (static: no live lab needed) --
    @staticmethod
    def inspect_lines(record: dict) -> list[str]:
        """``testbed inspect``'s lines after the hosts: every switch with its datapath id
        and ports."""
        spec = FabricSpec.from_json(Path(record["spec"]))
        short = lambda n: n[len(spec.prefix):]  # noqa: E731
        ports: dict[str, list[str]] = {}
        for p in spec.switch_ports():
            ports.setdefault(p.switch, []).append(f"{p.port}:{short(p.ifname)}>{short(p.peer)}")
        return ["switches (datapath id; port:interface>peer):"] + [
            f"  {short(sw.name):<8}{sw.dpid:#018x}  {sw.role}, plane {sw.plane}  "
            + " ".join(ports.get(sw.name, [])) for sw in spec.switches]

    @staticmethod
    def inspect_json(record: dict) -> dict:
        """What ``testbed inspect --json`` adds to the record: the topology spec itself."""
        return {"spec": json.loads(Path(record["spec"]).read_text())}

    @staticmethod
    def cli_argv(record: dict, node: str | None, command: str | None) -> None:
        """``testbed cli LAB``: Mininet's CLI, which the lab's supervisor serves (None)."""
        if node:
            raise ConfigError("NODE", "a fabric lab has one CLI (Mininet's); for a shell in "
                                      f"a host: testbed exec {record['name']} {node}")

    @staticmethod
    def capture_target(record: dict, port: str) -> tuple[Host, str, str]:
        """(host, interface, short name) of a port of the fabric (short or full name)."""
        spec = FabricSpec.from_json(Path(record["spec"]))
        p = capture.port_of(spec, port)
        host = state.host(record, p.host[len(spec.prefix):]) if p.host else RootHost()
        return host, p.ifname, p.name

    # -- acceptance ----------------------------------------------------------------------
    def accept(self, checks: list[str] | None = None,
               exclude: bool = False) -> tuple[dict, list[str]]:
        """The acceptance checks on this lab (:mod:`testbed.acceptance`); with ``exclude``
        the excluded links then leave the controller's ECMP sets."""
        from testbed.acceptance.exclude import reroute
        from testbed.acceptance.run import Lab, accept

        result, lines = accept(
            Lab.of(self.live, self.out, self.name), checks,
            (lambda links: reroute(self.live, self.stack, self.out, links)) if exclude
            else None)
        return result, lines

    def expand(self, leaves: int, nodes: int, checks: list[str] | None = None, *,
               plant: list[dict] = (), seed: int = 1) -> tuple[dict, list[str]]:
        """A rack cabled into this lab, ``plant``'s faults made in it, accepted and
        routed (:mod:`testbed.operations.expand`)."""
        from testbed.operations.expand import expand

        result, lines = expand(self.live, self.stack, self.out, self.name, leaves, nodes,
                               checks, self.progress, plant=plant, seed=seed)
        net = self.live.fabric.net
        mncli.sync_addresses(net, self.spec)
        mncli.add_short_names(net, self.spec.prefix)
        self.faults = FabricFaults(self.live, self.stack)
        return result, lines

    # -- faults by hand ----------------------------------------------------------------
    def fault(self, kind: str, target: str | None, **params: float) -> str:
        """Apply a fault of any registered kind now, with its parameters (a link_flap:
        its down/up steps, ``period_s`` apart)."""
        entry: dict = {"at_s": 0, "action": kind, **params}
        if target is not None:
            entry["target"] = target
        steps = parse_faults([entry], self.spec, "fault")
        for feature, action in needs(steps).items():
            if not getattr(self.caps, feature, True):
                raise ConfigError("KIND", f"{action!r} needs {feature}, which this kernel lacks")
        actions = self.faults.actions(names=[kind])
        t0 = time.monotonic()
        done = []
        for step in steps:
            delay = t0 + step.at_s - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            result = actions[step.action](step.target, **step.params)
            done.append(f"{step.action} {step.target}" + (
                f" (pid {result})" if step.action.startswith("controller") else ""))
            state.record_fault(self.out, step.action, step.target, done[-1])
        return "; ".join(done)

    def check_fault_kind(self, kind: str) -> None:
        fault_kinds.kind(kind, "KIND")
