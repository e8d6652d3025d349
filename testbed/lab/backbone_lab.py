"""A backbone that stays up: one timer set's namespaces, links (MACsec where the scenario
says) and FRR, converged (:func:`testbed.backbone.bringup.bring_up`); faults by hand
(``cut_link``, ``cut_risk_group``, ``fail_pop``, ``degrade_link`` ... and their restores)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from testbed.backbone.bringup import bring_up
from testbed.backbone.frr import Timers
from testbed.backbone.net import BackboneNet
from testbed.core import layout
from testbed.errors import ConfigError
from testbed.experiments.backbone import faults as fault_kinds
from testbed.experiments.backbone.schema import macsec_backend
from testbed.host.capabilities import probe
from testbed.host.files import write_json
from testbed.host.hosts import NetnsHost
from testbed.host.naming import claim, run_dir, run_prefix
from testbed.lab import state
from testbed.macsec.wireshark import UAT_FILE, write_uat
from testbed.monitor import backbone as watch_backbone
from testbed.monitor import launch as monitor

Progress = Callable[[str], None]
KEYS_FILE = layout.MACSEC_KEYS


class BackboneLab:
    KIND = "backbone"
    #: what ``testbed up`` and ``inspect`` call its nodes
    NODES = "routers"

    def __init__(self, scenario, variant, *, run_id: str, name: str, out: Path,
                 stack: ExitStack, progress: Progress) -> None:
        self.scenario, self.variant = scenario, variant
        self.experiment = scenario.experiment
        self.cfg, self.bb = self.experiment.cfg, self.experiment.bb
        self.run_id, self.name, self.out = run_id, name, out
        self.stack, self.progress = stack, progress
        self.net: BackboneNet | None = None
        self.folder = run_dir(run_id) / "backbone" / variant.name
        self.watched: monitor.Watched | None = None

    def start(self, *, traffic: bool, duration_s: float, monitor_port: int | str = "auto",
              with_prometheus: bool = False) -> None:
        caps = probe(self.run_id)
        backend = macsec_backend(self.cfg["macsec"], caps)
        claim(self.run_id)
        self.stack.callback(shutil.rmtree, run_dir(self.run_id), True)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.out.mkdir(parents=True, exist_ok=True)
        self.progress(f"{self.name}: starting {len(self.bb.nodes)} routers "
                      f"({len(self.bb.pops)} PoPs, {len(self.bb.regions)} regions), "
                      f"{len(self.bb.all_links)} links, {self.variant.name} timers")
        self.net, _ = bring_up(
            self.bb, prefix=run_prefix(self.run_id), folder=self.folder, stack=self.stack,
            cfg=self.cfg, timers=Timers(**self.cfg["timers"][self.variant.name]),
            macsec_backend=backend, shape=self.cfg["shape"] and caps.htb, delay=caps.netem,
            progress=self.progress, name=self.name)
        if self.net.secure:  # so that a capture of a wire can be decrypted
            write_json(self.out / KEYS_FILE, self.net.secure.keys(), secret=True)
            write_uat(self.net.secure.keys(), self.out / UAT_FILE)
        desc = self.out / layout.MONITOR_BACKBONE
        write_json(desc, watch_backbone.describe(self.bb, self.net, self.net.protocol,
                                                 self.folder))
        self.watched = monitor.watch(
            spec_file=desc, out=self.out, pid_dir=run_dir(self.run_id), stack=self.stack,
            name=self.name, port=monitor_port, with_prometheus=with_prometheus,
            kind="backbone", progress=self.progress)

    def hosts(self) -> dict[str, dict]:
        net, pops = self.net, {p.name for p in self.bb.pops}
        out = {}
        for node in self.bb.nodes:
            addresses = [f"lo {net.loopback(node)}/32"]
            if node not in pops:
                addresses.append(f"site0 {net.region_addr(node)}/24")
            out[node] = {"name": net.ns(node), "netns": net.ns(node),
                         "role": "pop" if node in pops else "region",
                         "vty": str(self.folder / "frr" / node), "addresses": addresses}
        return out

    def record(self) -> dict:
        net = self.net
        return {"size": {"routers": len(self.bb.nodes), "links": len(self.bb.all_links)},
                "prefix": run_prefix(self.run_id),
                "links": {name: {"a": lk.a, "b": lk.b, "wire_a": net.phys(name, "a"),
                                 "wire_b": net.phys(name, "b")}
                          for name, (_, lk) in net.links.items()},
                "keys": str(self.out / KEYS_FILE) if net.secure else None,
                "traffic": None,
                "monitor": self.watched.monitor.record() if self.watched else None,
                "prometheus": (self.watched.prometheus.record()
                               if self.watched and self.watched.prometheus else None)}

    def examples(self, lab: str) -> list[str]:
        regions = [r.name for r in self.bb.regions]
        link = next(iter(self.net.links))
        pop = self.bb.pops[0].name
        return [f"testbed exec {lab} {regions[0]} -- ping -c3 "
                f"{self.net.region_addr(regions[-1])}",
                f"testbed exec {lab} {pop} -- ip route",
                f"testbed cli {lab} {pop}                    # vtysh: show ip ospf neighbor",
                f"testbed fault {lab} cut_link {link}          # then restore_link",
                f"testbed capture {lab} {link} --seconds 5"
                + ("   # then: testbed decrypt FILE --keys "
                   f"{self.out / KEYS_FILE} -o plain.pcap" if self.net.secure else ""),
                f"testbed down {lab}"]

    # -- what the lab commands read from a lab's record (static: no live lab needed) --
    @staticmethod
    def inspect_lines(record: dict) -> list[str]:
        """``testbed inspect``'s lines after the routers: every link and its wires."""
        return ["links:"] + [f"  {name:<14}{link['a']} - {link['b']}  (wires "
                             f"{link['wire_a']}, {link['wire_b']})"
                             for name, link in record.get("links", {}).items()]

    @staticmethod
    def inspect_json(record: dict) -> dict:
        """What ``testbed inspect --json`` adds to the record: nothing."""
        return {}

    @staticmethod
    def cli_argv(record: dict, node: str | None, command: str | None) -> list[str]:
        """``testbed cli LAB ROUTER``: the router's vtysh (``command``: one line of it)."""
        if not node:
            raise ConfigError("ROUTER", f"name a router of {record['name']}: "
                                        f"{', '.join(record['hosts'])}")
        state.host(record, node)  # checks the name
        entry = record["hosts"][node]
        return (["ip", "netns", "exec", entry["netns"], "vtysh", "--vty_socket",
                 entry["vty"]] + (["-c", command] if command else []))

    @staticmethod
    def capture_target(record: dict, port: str) -> tuple[NetnsHost, str, str]:
        """(namespace, interface, short name) of ``LINK[:a|:b]``, the wire of a link's end."""
        link, _, side = port.partition(":")
        links = record.get("links", {})
        if link not in links or side not in ("", "a", "b"):
            raise ConfigError("PORT", f"no link {port!r} (a link name, optionally :a or :b "
                                      f"for its end, e.g. {next(iter(links), 'nyc-lon-1')}:b)")
        side = side or "a"
        node = links[link][side]
        return (NetnsHost(record["hosts"][node]["netns"]), links[link][f"wire_{side}"],
                f"{link}-{side}")

    def check_fault_kind(self, kind: str) -> None:
        if kind not in fault_kinds.KINDS:
            raise ConfigError("KIND", f"unknown fault kind {kind!r} for a backbone "
                                      f"(known: {', '.join(fault_kinds.KINDS)})")

    def fault(self, kind: str, target: str | None, *, loss: float | None = None,
              period_s: float | None = None, count: int | None = None) -> str:
        self.check_fault_kind(kind)
        cls = fault_kinds.KINDS[kind]
        what = cls.TARGET
        targets = fault_kinds.targets(self.bb, what)
        if target not in targets:
            raise ConfigError("TARGET", f"no {what} {target!r} (known: "
                                        f"{', '.join(sorted(targets))})")
        if period_s is not None or count is not None:
            raise ConfigError("--period", f"not used by {kind}")
        if fault_kinds.takes_loss(cls):
            if loss is None or not 0 < loss <= 1:
                raise ConfigError("--loss", f"{kind} needs --loss in (0, 1], got {loss!r}")
            cls().apply(self.net, target, loss)
        else:
            if loss is not None:
                raise ConfigError("--loss", f"not used by {kind}")
            cls().apply(self.net, target)
        state.record_fault(self.out, kind, target, f"{kind} {target}")
        return f"{kind} {target}"
