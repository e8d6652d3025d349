"""A tiny experiment kind: a ping mesh between namespaces on one Linux bridge.

The whole of what a new kind needs, in one module: its section's model, its variants,
how one variant runs into the folder it is handed, and its report section. Register it
with ``testbed.experiments.register("pingmesh", "examples.kinds.pingmesh")`` (or one
line ``testbed.experiments.KINDS.add``), then a scenario with a ``pingmesh:`` section
runs through ``testbed run`` like every other kind.
"""

from __future__ import annotations

import re
import shutil
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from pydantic import Field

from testbed.experiments import base
from testbed.host.files import write_json
from testbed.host.hosts import NetnsHost, RootHost
from testbed.host.naming import claim, new_run_id, register, run_dir, run_prefix
from topologies.params import Section

RTT = re.compile(r"= [\d.]+/([\d.]+)/")


class PingMesh(Section):
    """``pingmesh:``: how many namespaces, and how many pings per pair."""

    hosts: int = Field(3, ge=2, le=8)
    count: int = Field(3, ge=1, le=100)


class PingMeshExperiment(base.Experiment):
    KIND = "pingmesh"
    SECTIONS = {"pingmesh": PingMesh}

    def __init__(self, data: dict, **kw: Any) -> None:
        super().__init__(data, **kw)
        self.cfg = self.section(PingMesh, data.get("pingmesh"), "pingmesh")

    @property
    def variants(self) -> tuple[base.VariantRef, ...]:
        return (base.VariantRef("mesh"),)

    def run_variant(self, variant: base.VariantRef, *, seed: int, out: Path, tag: str,
                    ctx: base.RunContext) -> dict:
        run_id = ctx.run_id or new_run_id()
        prefix = run_prefix(run_id)
        made = not run_dir(run_id).exists()
        claim(run_id)  # the run folder where its names are registered, owned by us
        bridge, root = f"{prefix}br", RootHost()
        rtts: dict[str, float | None] = {}
        with ExitStack() as stack:
            root.check(["ip", "link", "add", bridge, "type", "bridge"])
            register(run_id, "link", bridge)  # so that `testbed clean` may remove it
            stack.callback(root.run, ["ip", "link", "del", bridge])
            root.check(["ip", "link", "set", bridge, "up"])
            hosts = []
            for i in range(self.cfg.hosts):
                ns = f"{prefix}h{i}"
                root.check(["ip", "netns", "add", ns])
                register(run_id, "netns", ns)
                stack.callback(root.run, ["ip", "netns", "del", ns])
                root.check(["ip", "link", "add", f"{ns}a", "type", "veth", "peer", "name",
                            f"{ns}b", "netns", ns])
                register(run_id, "link", f"{ns}a")
                root.check(["ip", "link", "set", f"{ns}a", "master", bridge, "up"])
                host = NetnsHost(ns)
                host.check(["ip", "addr", "add", f"10.9.0.{i + 1}/24", "dev", f"{ns}b"])
                host.check(["ip", "link", "set", f"{ns}b", "up"])
                hosts.append(host)
            for i, src in enumerate(hosts):
                for j in range(len(hosts)):
                    if i != j:
                        done = src.run(["ping", "-n", "-q", "-c", str(self.cfg.count),
                                        "-i", "0.2", "-W", "1", f"10.9.0.{j + 1}"])
                        match = RTT.search(done.stdout)
                        rtts[f"h{i}>h{j}"] = float(match.group(1)) if match else None
        if made:
            shutil.rmtree(run_dir(run_id), ignore_errors=True)
        write_json(out / "rtts.json", rtts)
        ok = sum(v is not None for v in rtts.values())
        ctx.progress(f"{tag}: {ok}/{len(rtts)} pairs answered")
        return {"name": variant.name, "run_id": run_id, "pairs": len(rtts), "answered": ok,
                "fabric": {"switches": 1, "hosts": self.cfg.hosts, "links": self.cfg.hosts,
                           "start_s": 0.0, "stop_s": 0.0},
                "agents": {"chains_started": 0, "chains_completed": 0, "chains_failed": 0,
                           "latency_ms": {"p50": None, "p95": None, "p99": None,
                                          "max": None}},
                "training": {"bytes": 0, "goodput_mbps": 0.0, "iterations": 0,
                             "iteration_ms": {"p50": None, "p99": None}}}

    @staticmethod
    def report_section(summary: dict, out: Path) -> list[str]:
        run = summary["runs"][0]
        return ["## Ping mesh", "", f"{run['answered']} of {run['pairs']} host pairs "
                "answered (round-trip times in `variants/mesh/rtts.json`).", ""]


EXPERIMENT = PingMeshExperiment
