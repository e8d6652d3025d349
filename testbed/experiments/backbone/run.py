"""The backbone kind: real FRR (OSPF or eBGP, BFD, ECMP), faults on a schedule.

The section is checked in :mod:`.schema` (pure); the report is :mod:`.report`. The
kind builds the backbone (the library :mod:`testbed.backbone`) once per timer variant
(e.g. ``default`` and ``fast``), starts zebra, bfdd and ospfd (``daemons``: or bgpd
instead of ospfd) in every PoP and region namespace, waits until every region reaches
every other, then runs probes between every pair of regions, the replication flows
(iperf3) and the fault schedule. With ``checkpoints:``
(:mod:`testbed.storage.replication`) each variant also runs a SeaweedFS store in two
regions and writes checkpoint shards across, asynchronously (filer.sync) or
synchronously: one variant per timer set and mode. Figures come
from the probe records and the routing-table events (``ip monitor route``); see
:mod:`testbed.backbone.analysis`. Everything is removed at the end, also on error,
Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from testbed.backbone import analysis, secure
from testbed.backbone.bringup import bring_up as backbone_bring_up
from testbed.backbone.frr import PROTOCOLS, Timers
from testbed.backbone.net import BackboneNet
from testbed.core import layout
from testbed.core.fidelity import WatchedLink
from testbed.core.layout import MACSEC_KEYS
from testbed.core.layout import run_dir as results_dir
from testbed.core.results import ZERO_TRAINING
from testbed.errors import BringUpError, ConfigError
from testbed.experiments import base
from testbed.experiments.backbone import faults as fault_kinds
from testbed.experiments.backbone.report import macsec_summary, plot, report_section, table
from testbed.experiments.backbone.schema import (
    DELAY_WORDS,
    BackboneSection,
    check_timing,
    delay_backend,
    macsec_backend,
    validate,
)
from testbed.faults.schedule import Fault, FaultRecord, Schedule
from testbed.host.files import read_jsonl, write_json
from testbed.host.hosts import NetnsHost
from testbed.host.naming import claim, new_run_id, run_dir, run_prefix
from testbed.host.procs import Helper, python_env, wait_for
from testbed.macsec.decrypt import key_reference
from testbed.storage import replication as xregion
from testbed.workloads import iperf3
from topologies.backbone import Backbone
from topologies.backbone_check import design_check

Progress = Callable[[str], None]
IPERF_PORT = 5301
WIRE_SAMPLE = 500  # frames captured on one wire per variant (with MACsec)
#: how long the regions' probes may take to start (their first line written)
PROBES_START_S = 60.0
ZERO_AGENTS = {"chains_started": 0, "chains_completed": 0, "chains_failed": 0,
               "latency_ms": {"p50": None, "p95": None, "p99": None, "max": None}}


# running -------------------------------------------------------------------


def _route_events(path: Path) -> list[float]:
    """Epoch times of the lines ``ip -ts monitor route`` wrote."""
    times = []
    if not path.exists():
        return times
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("[") and "]" in line:
            try:
                times.append(datetime.fromisoformat(line[1:line.index("]")]).timestamp())
            except ValueError:
                continue
    return times


def _iperf(path: Path) -> dict:
    data = iperf3.read(path)
    if data is None:
        return {"goodput_mbps": None, "bytes": 0, "intervals": [], "start": None,
                "error": "no iperf3 result"}
    start = data.get("start", {}).get("timestamp", {}).get("timesecs")
    end = data.get("end", {}).get("sum_received", {})
    intervals = [(round(iv["sum"]["start"], 3), round(iv["sum"]["bits_per_second"] / 1e6, 3))
                 for iv in data.get("intervals", [])]
    return {"goodput_mbps": round(end.get("bits_per_second", 0) / 1e6, 3),
            "bytes": int(end.get("bytes", 0)), "intervals": intervals, "start": start,
            "error": data.get("error")}


class Variant:
    """One timer variant: bring-up, traffic, schedule, teardown, figures."""

    def __init__(self, name: str, cfg: dict, bb: Backbone, *, out: Path, root: Path,
                 folder: Path, prefix: str, duration_s: float, caps: Any,
                 progress: Progress,
                 watch: Callable[[list[WatchedLink]], AbstractContextManager] | None = None,
                 timer_set: str | None = None, mode: str | None = None, seed: int = 1
                 ) -> None:
        self.name, self.cfg, self.bb = name, cfg, bb
        #: the timer set (the variant's name unless checkpoint modes make the variants)
        self.timer_set = timer_set or name
        #: the checkpoint replication mode (``checkpoints:``), else None
        self.mode, self.seed = mode, seed
        self.out, self.root = out, root
        self.folder = folder / name
        self.prefix, self.duration_s, self.caps, self.progress = (prefix, duration_s, caps,
                                                                  progress)
        self.timers = Timers(**cfg["timers"][self.timer_set])
        self.snapshots: list[tuple[float, dict]] = []
        self.macsec_backend = macsec_backend(cfg["macsec"], caps)
        #: the measured window of the fidelity monitor (``RunContext.watch``)
        self.watch = watch or (lambda links: nullcontext())

    def _helper(self, stack: ExitStack, name: str, argv: list[str], **kw: Any) -> Helper:
        helper = Helper(name, argv, pid_dir=self.folder / "pids", env=python_env(), **kw)
        stack.callback(helper.stop, 2.0)
        return helper

    def _snapshot(self, net: BackboneNet) -> None:
        self.snapshots.append((time.time(), net.paths()))

    def run(self) -> dict:
        self.out.mkdir(parents=True, exist_ok=True)
        self.folder.mkdir(parents=True, exist_ok=True)
        t_start = time.monotonic()
        regions = [r.name for r in self.bb.regions]
        with ExitStack() as stack:
            stack.callback(shutil.rmtree, self.folder, True)
            net, start_s = backbone_bring_up(
                self.bb, prefix=self.prefix, folder=self.folder, stack=stack, cfg=self.cfg,
                timers=self.timers, macsec_backend=self.macsec_backend,
                shape=self.cfg["shape"] and self.caps.htb, delay=self.caps.netem,
                progress=self.progress, name=self.name, t_start=t_start)
            stack.enter_context(self.watch(watched_links(net)))  # the measured window
            for node in self.bb.nodes:
                self._helper(stack, f"mon-{node}", ["ip", "-n", net.ns(node), "-ts", "monitor",
                                                    "route"],
                             stdout_file=self.out / f"routes-{node}.log")
            iperf = self._start_replication(stack, net)
            ckpt = self._start_checkpoints(stack, net)
            # started before the probes' clock, so that the schedule starts on time
            sample = self._wire_sample(stack, net)
            # the paths before a fault are read ahead of it, by what a reading takes here
            # (seconds under software emulation) and a fifth more, so that the fault fires
            # on time and the reading is still of the moment before it (twice as much read
            # the lab VM's routes before they had converged)
            snapshot_lead = 0.0
            if self.cfg["faults"]:  # (a reading costs seconds there: only when needed)
                t_read = time.monotonic()
                net.paths()
                snapshot_lead = 1.2 * (time.monotonic() - t_read) + 0.05
            if ckpt:  # started and ready now, writing from the clock's start (go, below)
                ckpt.start_traffic(self.duration_s, self.folder / "checkpoints.go")
                ckpt.wait_ready()
            probes = []
            for region in regions:
                peers = [f"--peer={p}={net.region_addr(p)}" for p in regions if p != region]
                argv = NetnsHost(net.ns(region)).argv([
                        sys.executable, "-m", "traffic.probe", "--name", region,
                        "--bind", net.region_addr(region),
                        "--rate", str(self.cfg["probe_rate_pps"]), "--duration",
                        str(self.duration_s), "--out", str(self.out / f"probes-{region}.jsonl"),
                        *peers])
                probes.append(self._helper(stack, f"probe-{region}", argv,
                                           log=self.out / f"probe-{region}.log"))
            files = [self.out / f"probes-{r}.jsonl" for r in regions]
            # 60 s: a probe writes its first line as soon as its Python has started, well
            # under a second on a lab machine; four took over 10 s in the amd64 lab VM
            # under software emulation beside another VM (waiting costs nothing when ready)
            if not wait_for(lambda: all(f.exists() and f.stat().st_size for f in files),
                            PROBES_START_S):
                late = [r for r, f in zip(regions, files, strict=True)
                        if not (f.exists() and f.stat().st_size)]
                raise BringUpError(f"the probes of {', '.join(late)} did not start in "
                                   f"{PROBES_START_S:g} s (see probe-{late[0]}.log)")
            t0 = min(json.loads(f.read_text().splitlines()[0])["t0"] for f in files)
            if ckpt:  # the run's clock has started: the writer's first shard
                ckpt.go()
            faults = [Fault(f["at_s"], f["action"], f["target"], f.get("loss"))
                      for f in self.cfg["faults"]]
            sched = Schedule(faults, fault_kinds.actions(net), before_lead_s=snapshot_lead,
                             before=lambda rec: self._snapshot(net),
                             after=lambda rec: self.progress(
                                 f"  {self.name}: {rec.at_s:g} s {rec.action} {rec.target}"
                                 + ("" if rec.ok else f" FAILED: {rec.error}")))
            sched.run(t0)
            for p in probes:
                p.wait(max(1.0, t0 + self.duration_s + 5 - time.time()))
            self._snapshot(net)
            for h in iperf:
                h.wait(max(1.0, t0 + self.duration_s + 10 - time.time()))
            ckpt_figures = None
            if ckpt:
                faults_at = [{"fault": f"{r.action} {r.target}", "at_s": round(r.started - t0, 3)}
                             for r in sched.records]
                ckpt_figures = ckpt.finish(t0, self.duration_s, faults_at)
                self.progress(f"  {self.name}: checkpoints {ckpt_figures['written']}/"
                              f"{ckpt_figures['objects']} written, "
                              f"{ckpt_figures['lost']} lost, "
                              f"{ckpt_figures['checksum_mismatches']} checksum mismatches")
            macsec = self._macsec_figures(net, sample)
            stop_t = time.monotonic()
        stop_s = round(time.monotonic() - stop_t, 3)
        entry = self._figures(sched.records, t0, regions, start_s, stop_s, net)
        entry["macsec"] = macsec
        if ckpt_figures:
            entry["checkpoints"] = ckpt_figures
        if macsec:
            keys = macsec.pop("keys")
            file = self.out / MACSEC_KEYS
            write_json(file, keys, secret=True)
            macsec["keys"] = key_reference(keys, str(file.relative_to(self.root)))
            if sample:
                macsec["wire_sample"] = wire_sample_figures(self.root / sample["pcap"], keys,
                                                            sample)
        return entry

    def _wire_sample(self, stack: ExitStack, net: BackboneNet) -> dict | None:
        """tcpdump on one wire (side a) from the start of the probes, ``WIRE_SAMPLE`` frames.

        The link is the first one the schedule cuts (else the first link): the
        capture shows what an eavesdropper on that fibre would see.
        """
        if not net.secure or shutil.which("tcpdump") is None:
            return None
        cut = [f["target"] for f in self.cfg["faults"]
               if fault_kinds.KINDS[f["action"]].TARGET == "link"]
        link = cut[0] if cut else next(iter(net.links))
        _, lk = net.links[link]
        pcap = self.out / layout.WIRE_PCAP
        log = self.out / layout.TCPDUMP_LOG
        self._helper(stack, "tcpdump", NetnsHost(net.ns(lk.a)).argv([
            "tcpdump", "-i", net.wire(link, "a"), "-s", "0", "-U", "-c", str(WIRE_SAMPLE),
            "-Z", "root", "-w", str(pcap)]), log=log)
        if not wait_for(lambda: log.exists() and "listening on" in log.read_text(), 10):
            raise BringUpError(f"tcpdump did not start (see {log})")
        return {"link": link, "interface": net.wire(link, "a"), "node": lk.a,
                "pcap": str(pcap.relative_to(self.root))}

    def _macsec_figures(self, net: BackboneNet, sample: dict | None) -> dict | None:
        """Counters of every link end and forwarder CPU, read before the teardown."""
        if not net.secure:
            return None
        counters = net.secure.counters()
        cpu = net.secure.cpu_seconds()
        return {"backend": net.secure.backend, "cipher": net.secure.settings["cipher"],
                "counters": counters, "totals": secure.totals(counters),
                "forwarder_cpu_s": cpu, "forwarder_cpu_total_s": round(sum(cpu.values()), 2),
                "keys": net.secure.keys(), "wire_sample": sample}

    def _start_checkpoints(self, stack: ExitStack,
                           net: BackboneNet) -> xregion.CheckpointRun | None:
        """Both regions' stores (and filer.sync in async mode), before the probes."""
        if not self.mode:
            return None
        run = xregion.CheckpointRun(self.cfg["checkpoints"], self.mode, ns=net.ns,
                                        addr=net.region_addr, out=self.out, folder=self.folder,
                                        stack=stack, seed=self.seed, env=python_env(),
                                        progress=self.progress)
        started = run.start()
        nodes, links = net.trace(run.src, run.dst)
        run.path = {"nodes": nodes, "links": links,
                    "one_way_ms": round(sum(net.links[lk][1].delay_ms for lk in links), 3)}
        self.progress(f"  {self.name}: stores up in "
                      + ", ".join(f"{r} {s:g} s" for r, s in started.items())
                      + f"; {self.mode} replication")
        return run

    def _start_replication(self, stack: ExitStack, net: BackboneNet) -> list[Helper]:
        clients = []
        for i, flow in enumerate(self.cfg["replication"]):
            port = IPERF_PORT + i
            dst = net.region_addr(flow["dst"])
            self._helper(stack, f"iperf-s{i}", NetnsHost(net.ns(flow["dst"])).argv(
                iperf3.server(dst, port)), log=self.out / f"iperf-s{i}.log")
            argv = NetnsHost(net.ns(flow["src"])).argv(iperf3.client(
                dst, port, seconds=int(self.duration_s), bind=net.region_addr(flow["src"]),
                rate_mbps=flow["rate_mbps"]))
            if not wait_for(lambda d=flow["dst"], p=port: _listening(net.ns(d), p), 5):
                raise BringUpError(f"iperf3 server for replication[{i}] not listening")
            clients.append(self._helper(stack, f"iperf-c{i}", argv,
                                        stdout_file=self.out / f"replication-{i}.json",
                                        log=self.out / f"iperf-c{i}.log"))
        return clients

    def _figures(self, records: list[FaultRecord], t0: float, regions: list[str],
                 start_s: float, stop_s: float, net: BackboneNet) -> dict:
        recs = [r for region in regions
                for r in read_jsonl(self.out / f"probes-{region}.jsonl")]
        pairs = analysis.load(recs)
        events = sorted(t for node in self.bb.nodes
                        for t in _route_events(self.out / f"routes-{node}.log"))
        end_t = t0 + self.duration_s
        failovers, restores = [], []
        for i, rec in enumerate(records):
            next_t = records[i + 1].started if i + 1 < len(records) else end_t
            figs = analysis.fault_figures(pairs, rec.started, next_t, events,
                                          self.cfg["tail_s"])
            entry = {"fault": f"{rec.action} {rec.target}", "action": rec.action,
                     "target": rec.target, "at_s": round(rec.started - t0, 3),
                     "action_ms": round((rec.done - rec.started) * 1000, 2), "ok": rec.ok,
                     **figs,
                     "path_before": self.snapshots[i][1] if i < len(self.snapshots) else None,
                     "path_after": (self.snapshots[i + 1][1]
                                    if i + 1 < len(self.snapshots) else None)}
            (restores if rec.action.startswith("restore") else failovers).append(entry)
        timeline = analysis.loss_timeline(pairs, t0, end_t)
        write_json(self.out / layout.LOSS_TIMELINE, {"t0": t0, "bin_s": 0.1,
                                                     "loss": timeline})
        replication = []
        for i, flow in enumerate(self.cfg["replication"]):
            res = _iperf(self.out / f"replication-{i}.json")
            offset = (res["start"] - t0) if res["start"] else 0.0
            around = []
            for f in failovers + restores:
                before = [m for t, m in res["intervals"] if f["at_s"] - 3 <= t + offset
                          < f["at_s"]]
                after = [m for t, m in res["intervals"] if f["at_s"] <= t + offset
                         < f["at_s"] + 3]
                around.append({"fault": f["fault"],
                               "before_mbps": _mean(before), "after_mbps": _mean(after)})
            replication.append({**flow, "goodput_mbps": res["goodput_mbps"],
                                "bytes": res["bytes"], "error": res["error"],
                                "intervals": [(round(t + offset, 3), m)
                                              for t, m in res["intervals"]],
                                "across_faults": around})
        total_bytes = sum(r["bytes"] for r in replication)
        return {
            "name": self.name,
            "timers": self.cfg["timers"][self.timer_set],
            "fabric": {"switches": 0, "hosts": len(self.bb.nodes),
                       "links": len(self.bb.all_links), "start_s": start_s, "stop_s": stop_s},
            "agents": json.loads(json.dumps(ZERO_AGENTS)),
            "training": dict(ZERO_TRAINING),
            "failovers": failovers,
            "restores": restores,
            "replication": replication,
            "replication_bytes": total_bytes,
            "delay_applied": net.delay_applied,
            "delay_by": net.delay_by,
            "shaped": net.shaped,
            "loss_timeline": layout.LOSS_TIMELINE,
            "t0": t0,
        }


def wire_sample_figures(pcap: Path, keys: dict, sample: dict) -> dict:
    """Ethertypes of the frames captured on a wire, and how many decrypt with the keys."""
    from testbed.macsec.decrypt import decrypt_pcap
    from traffic.pcapfile import read_frames

    try:
        frames = read_frames(pcap)
    except (OSError, ValueError) as exc:
        return {**sample, "frames": 0, "error": str(exc)}
    types: dict[str, int] = {}
    for frame in frames:
        key = f"0x{int.from_bytes(frame[12:14], 'big'):04x}" if len(frame) >= 14 else "short"
        types[key] = types.get(key, 0) + 1
    ok, failed = decrypt_pcap(pcap, keys)
    return {**sample, "frames": len(frames), "ethertypes": types, "decrypted": ok,
            "not_decrypted": failed}


def watched_links(net: BackboneNet) -> list[WatchedLink]:
    """Both ends of every shaped link (the wires with MACsec), in their namespaces, for
    the fidelity monitor. With netem delay a queue also holds the packets in flight (up to
    the rate times the delay), which is not saturation."""
    if not net.shaped:
        return []
    out = []
    for name, (_, lk) in net.links.items():
        in_flight = (int(lk.capacity_mbps * 1e6 / 8 * lk.delay_ms / 1000) + 3000
                     if net.netem else 0)
        out += [WatchedLink(net.ns(node), net.phys(name, side), lk.capacity_mbps, in_flight)
                for side, node in (("a", lk.a), ("b", lk.b))]
    return out


def _listening(netns: str, port: int) -> bool:
    done = NetnsHost(netns).run(["ss", "-Hltn", f"sport = :{port}"])
    return bool(done.stdout.strip())


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 3) if values else None


@dataclass(frozen=True)
class CheckpointVariant:
    """A variant of a backbone with checkpoint writes: a timer set and a replication mode."""

    name: str
    timers: str
    mode: str


def variant_plan(cfg: dict) -> tuple:
    """One variant per timer set; with ``checkpoints``, one per timer set and mode, named
    by the mode alone when there is one timer set.

    >>> cfg = {"timers": {"fast": {}}, "checkpoints": {"modes": ["async", "sync"]}}
    >>> [(v.name, v.timers, v.mode) for v in variant_plan(cfg)]
    [('async', 'fast', 'async'), ('sync', 'fast', 'sync')]
    >>> [v.name for v in variant_plan({**cfg, "timers": {"default": {}, "fast": {}}})]
    ['default-async', 'default-sync', 'fast-async', 'fast-sync']
    """
    if not cfg.get("checkpoints"):
        return tuple(base.VariantRef(name) for name in cfg["timers"])
    one = len(cfg["timers"]) == 1
    return tuple(CheckpointVariant(mode if one else f"{t}-{mode}", t, mode)
                 for t in cfg["timers"] for mode in cfg["checkpoints"]["modes"])


class BackboneExperiment(base.Experiment):
    """The ``backbone:`` kind: one variant per timer set (e.g. ``default`` and ``fast``)."""

    KIND = "backbone"
    LAB = "testbed.lab.backbone_lab:BackboneLab"
    SECTIONS = {"backbone": BackboneSection}

    def __init__(self, data: dict, **kw: Any) -> None:
        super().__init__(data, **kw)
        self.cfg = validate(data.get("backbone"))
        check_timing(self.cfg, self.duration_s)
        self.bb = Backbone.from_dict(self.cfg["design"])
        self._variants = variant_plan(self.cfg)
        self.folder: Path | None = None
        self.run_id = ""

    @property
    def variants(self) -> tuple[base.VariantRef, ...]:
        return self._variants

    def check_host(self, caps: Any) -> None:
        if self.cfg["macsec"]["enabled"]:
            try:
                macsec_backend(self.cfg["macsec"], caps)
            except BringUpError as exc:
                raise ConfigError("backbone.macsec.backend", str(exc).split(": ", 1)[-1]) \
                    from None

    def start(self, ctx: base.RunContext) -> None:
        bb, cfg, caps = self.bb, self.cfg, ctx.caps
        ctx.progress(f"backbone: {len(bb.pops)} PoPs, {len(bb.regions)} regions, "
                     f"{len(bb.all_links)} links; delay "
                     + DELAY_WORDS[delay_backend(cfg, caps)])
        if cfg["macsec"]["enabled"]:
            ctx.progress(f"backbone: links encrypted with MACsec ({cfg['macsec']['cipher']}, "
                         f"{macsec_backend(cfg['macsec'], caps)} backend, protected MTU "
                         f"{cfg['macsec']['mtu']})")
        self.run_id = ctx.run_id or new_run_id()
        root = run_dir(self.run_id)
        made_root = not root.exists()
        claim(self.run_id)
        self.folder = root / "backbone"
        self.folder.mkdir(parents=True, exist_ok=True)
        ctx.stack.callback(shutil.rmtree, root if made_root else self.folder, True)

    def run_variant(self, variant: base.VariantRef, *, seed: int, out: Path, tag: str,
                    ctx: base.RunContext) -> dict:
        assert self.folder is not None
        timer_set = getattr(variant, "timers", variant.name)
        mode = getattr(variant, "mode", None)
        ctx.progress(f"{tag}: {', '.join(self.cfg['daemons'])}; timers "
                     f"{timer_set} {self.cfg['timers'][timer_set]}"
                     + (f"; checkpoints {mode}" if mode else ""))
        entry = Variant(variant.name, self.cfg, self.bb, out=out, root=ctx.root,
                        folder=self.folder, prefix=run_prefix(self.run_id),
                        duration_s=ctx.duration_s, caps=ctx.caps,
                        progress=ctx.progress, watch=ctx.watch, timer_set=timer_set,
                        mode=mode, seed=seed).run()
        # the run's id, as the fabric kinds record it: its prefix names what it made
        return {"run_id": self.run_id, **entry}

    def finish(self, runs: list[dict], out: Path, ctx: base.RunContext) -> dict:
        bb, cfg = self.bb, self.cfg
        plot(runs, out)
        ckpt_plot = xregion.plot(runs, lambda e: results_dir(e, out), out)
        summary = {
            "pops": [p.name for p in bb.pops],
            "regions": [r.name for r in bb.regions],
            "links": [{"name": lk.name, "a": lk.a, "b": lk.b, "kind": lk.kind,
                       "capacity_mbps": lk.capacity_mbps, "length_km": lk.length_km,
                       "delay_ms": lk.delay_ms,
                       "risk_groups": [g.name for g in bb.groups_of(lk.name)]}
                      for lk in bb.all_links],
            "risk_groups": {g.name: list(g.links) for g in bb.risk_groups},
            "design_check": design_check(bb).to_dict(),
            "delay_applied": delay_backend(cfg, ctx.caps) is not None,
            "delay_by": delay_backend(cfg, ctx.caps),
            "encrypted": bool(cfg["macsec"]["enabled"]),
            "macsec": macsec_summary(cfg["macsec"], runs),
            "timers": ({e["name"]: e["timers"] for e in runs} if cfg.get("checkpoints")
                       else cfg["timers"]),
            "daemons": cfg["daemons"],
            "protocol": next(d for d in cfg["daemons"] if d in PROTOCOLS),
            "failovers": {e["name"]: e["failovers"] for e in runs},
            "restores": {e["name"]: e["restores"] for e in runs},
            "replication": {e["name"]: e["replication"] for e in runs},
            "plot": layout.PROBE_LOSS_PLOT,
        }
        if cfg.get("checkpoints"):
            summary["checkpoints"] = {e["name"]: e["checkpoints"] for e in runs
                                      if e.get("checkpoints")}
            summary["checkpoints_plot"] = ckpt_plot.name if ckpt_plot else None
        return {"backbone": summary}

    @staticmethod
    def report_section(summary: dict, out: Path) -> list[str]:
        return report_section(summary["backbone"], out)

    @staticmethod
    def table(summary: dict) -> str | None:
        return table(summary["backbone"])


EXPERIMENT = BackboneExperiment
