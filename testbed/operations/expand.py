"""Expansion: a rack cabled into a running fabric, accepted, then routed.

``testbed expand LAB --leaves N --nodes M`` (and the fault kind ``add_rack`` of a run)
grows a leaf-spine by ``N`` leaves on every plane and the ``M`` nodes behind them: the
builder's own layout with more of each (every old switch, node, port, address and MAC
stays as it is; each new leaf gets the old leaves' nodes per leaf and an uplink to every
spine, so the fabric stays at its oversubscription; the spines get a port each). Then:

1. probes start across the old fabric (UDP, every plane, from the hosts of its first
   leaf to those of its last, :data:`PROBE_PPS` a pair) and run until the end;
2. the rack is cabled in (:meth:`testbed.fabric.net.Fabric.grow`): its switches in
   switch processes of their own, its hosts, its links, the spines' new ports; nothing
   that runs restarts. The controller does not know the new switches yet: they forward
   nothing;
3. acceptance on the rack alone (:func:`testbed.acceptance.run.accept` with a
   :class:`~testbed.acceptance.run.Rack`): its cables (LLDP), its links at their rates,
   the paths from and to its leaves, pinned by the check's own flows;
4. the controller starts again on the grown fabric without what acceptance excluded
   (as exclusion does: routes rewritten in place on the old switches), and the time until
   every accepted new node reaches the old fabric on every plane is measured;
5. the system test: a collective over the rack's accepted nodes, on the routes now there.

Recorded in ``expansion.json`` (and the rack's acceptance in ``acceptance-rack.json``):
what was added, the verdicts, the controller's restart, the time to first traffic, and
the old fabric's probes sent and lost.
"""

from __future__ import annotations

import dataclasses
import json
import select
import socket
import struct
import threading
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from testbed.core import layout
from testbed.errors import BringUpError, ConfigError
from testbed.host import netns
from testbed.host.files import write_json
from topologies.spec import FabricSpec, HostInterface, TopologyError, link_name, short

RECORD = "expansion.json"
#: the controller's spec once a rack is routed (the grown fabric without what was excluded)
GROWN_SPEC = "spec-grown.json"
#: probes a second on each old-fabric pair while the rack is added
PROBE_PPS = 100
#: pairs probed on each plane
PROBE_PAIRS = 4
PROBE_PORT = 46000
#: how long probes still in flight may take to arrive once sending stops
GRACE_S = 0.5
#: how long the rack's nodes may take to reach the old fabric once routed
FIRST_TRAFFIC_S = 30.0
PROBE = struct.Struct("!4sHI")  # magic, pair, sequence number
MAGIC = b"TBEX"


def grown_spec(spec: FabricSpec, leaves: int, nodes: int) -> FabricSpec:
    """``spec`` with ``leaves`` more leaves on every plane and ``nodes`` more nodes;
    :class:`ConfigError` naming ``--leaves`` or ``--nodes`` when that is not a rack of
    this fabric.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", planes=2, nodes=8, leaves_per_plane=2)
    >>> g = grown_spec(spec, 1, 4)
    >>> g.counts(), [h.interfaces[0].switch for h in g.hosts[7:9]]
    ({'switches': 10, 'hosts': 12, 'links': 36}, ['tbdoc0p0l1', 'tbdoc0p0l2'])
    >>> try:
    ...     grown_spec(spec, 1, 3)
    ... except ConfigError as exc:
    ...     print(exc)
    --nodes: must be 4 (1 leaf of 4 nodes each, as the fabric's leaves have), got 3
    """
    from topologies import leafspine

    if spec.builder != leafspine.NAME:
        raise ConfigError("LAB", f"racks are added to a leaf-spine fabric; this one is built "
                                 f"by {spec.builder!r}")
    p = spec.params
    if isinstance(leaves, bool) or not isinstance(leaves, int) or leaves < 1:
        raise ConfigError("--leaves", f"must be a whole number of 1 or more, got {leaves!r}")
    if leaves % spec.rails:
        raise ConfigError("--leaves", f"must be a multiple of the fabric's {spec.rails} rails "
                                      f"(every rail has its own leaf), got {leaves}")
    per_leaf = spec.nodes // (p["leaves_per_plane"] // spec.rails)
    want = per_leaf * leaves // spec.rails
    if nodes != want:
        raise ConfigError("--nodes", f"must be {want} ({leaves} "
                                     f"{'leaf' if leaves == 1 else 'leaves'} of {per_leaf} "
                                     f"nodes each, as the fabric's leaves have), got {nodes}")
    try:
        grown = leafspine.build_fabric(
            prefix=spec.prefix, planes=spec.planes, rails=spec.rails,
            nodes=spec.nodes + nodes, leaves_per_plane=p["leaves_per_plane"] + leaves,
            spines_per_plane=p["spines_per_plane"], oversubscription=p["oversubscription"],
            link_mbps=spec.link_mbps, mtu=spec.mtu, queue_kb=spec.queue_kb,
            delay_ms=spec.delay_ms)
    except TopologyError as exc:
        field = {"leaves_per_plane": "--leaves", "nodes": "--nodes"}.get(exc.field, "LAB")
        raise ConfigError(field, f"the grown fabric: {exc.reason}") from None
    kept = set(grown.links)
    if any(lk not in kept for lk in spec.links) or not set(spec.hosts) <= set(grown.hosts):
        raise ConfigError("LAB", "this fabric is not the builder's own layout (an explicit "
                                 "graph, or links the builder would not make)")
    return grown


class OldFabricProbes:
    """UDP probes across the old fabric while it grows: on every plane and rail from
    the hosts behind its first leaf to those behind its last (through the spines; a
    rail with one leaf: between that leaf's hosts), a port per pair (so ECMP spreads
    the pairs), counted by sequence number at the receiver."""

    def __init__(self, spec: FabricSpec, host_pid: Callable[[str], int],
                 pps: float = PROBE_PPS, pairs: int = PROBE_PAIRS) -> None:
        node = {i.name: h.name for h in spec.hosts for i in h.interfaces}
        self.pairs: list[tuple[HostInterface, HostInterface]] = []
        for plane in range(spec.planes):
            for rail in range(spec.rails):  # a rail's own subnet
                behind: dict[str, list[HostInterface]] = {}
                for intf in spec.interfaces(plane):
                    if intf.rail == rail:
                        behind.setdefault(intf.switch, []).append(intf)
                leaves = list(behind)
                if len(leaves) > 1:
                    first, last = behind[leaves[0]], behind[leaves[-1]]
                else:  # one leaf a rail: across it
                    first, last = behind[leaves[0]][::2], behind[leaves[0]][1::2]
                self.pairs += list(zip(first, last, strict=False))[:pairs]
        self.ns = {i.name: netns.of_pid(host_pid(node[i.name]))
                   for pair in self.pairs for i in pair}
        self.gap = 1.0 / pps
        self.sent = [0] * len(self.pairs)
        self.seen: list[set[int]] = [set() for _ in self.pairs]
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started = self.stopped = 0.0

    def _socket(self, intf: HostInterface, port: int) -> socket.socket:
        return netns.udp_socket(self.ns[intf.name], intf.name, intf.ip, port)

    def start(self) -> None:
        self.tx = [self._socket(a, PROBE_PORT + k) for k, (a, _) in enumerate(self.pairs)]
        self.rx = [self._socket(b, PROBE_PORT + k) for k, (_, b) in enumerate(self.pairs)]
        self.started = time.time()
        self._thread = threading.Thread(target=self._run, name="expand-probes", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        by_fd = {s.fileno(): k for k, s in enumerate(self.rx)}
        seq, start, end = 0, time.monotonic(), None
        while True:
            now = time.monotonic()
            if end is None and self._stop.is_set():
                end = now + GRACE_S
            if end is not None and now >= end:
                return
            if end is None and now >= start + seq * self.gap:
                for k, (_, b) in enumerate(self.pairs):
                    try:
                        self.tx[k].sendto(PROBE.pack(MAGIC, k, seq), (b.ip, PROBE_PORT + k))
                    except OSError:  # counted as sent, and lost
                        pass
                    self.sent[k] += 1
                seq += 1
                continue
            wait = (start + seq * self.gap - now) if end is None else end - now
            ready, _, _ = select.select(self.rx, [], [], max(0.0, min(wait, 0.1)))
            for s in ready:
                while True:
                    try:
                        data = s.recv(64)
                    except (BlockingIOError, InterruptedError):
                        break
                    if len(data) >= PROBE.size:
                        magic, k, n = PROBE.unpack_from(data)
                        if magic == MAGIC and k == by_fd[s.fileno()]:
                            self.seen[k].add(n)

    def stop(self) -> dict:
        """Stop sending, wait for what is in flight; the record."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(GRACE_S + 5)
        self.stopped = time.time()
        for s in [*getattr(self, "tx", []), *getattr(self, "rx", [])]:
            s.close()
        sent, got = sum(self.sent), sum(len(s) for s in self.seen)
        return {"pairs": [f"{a.name}>{b.name}" for a, b in self.pairs],
                "pps_per_pair": round(1 / self.gap), "seconds": round(
                    self.stopped - self.started, 2), "sent": sent, "lost": sent - got,
                "lost_per_pair": [n - len(s) for n, s in zip(self.sent, self.seen,
                                                             strict=True)]}


def first_traffic(live, spec: FabricSpec, nodes: list[str], since: float,
                  within_s: float = FIRST_TRAFFIC_S) -> float:
    """Seconds from ``since`` until each of ``nodes`` (full names) has reached an old
    node on every plane (one echo request at a time, each answered within 0.2 s);
    :class:`BringUpError` past ``within_s``."""
    target = spec.hosts[0]
    deadline = time.monotonic() + within_s
    for name in nodes:
        for plane in range(spec.planes):
            ip = target.interface(plane, 0).ip
            while not live.fabric.ping(name, ip, count=1, wait_s=0.2):
                if time.monotonic() > deadline:
                    raise BringUpError(f"{short(spec, name)} did not reach "
                                       f"{short(spec, target.name)} on plane {plane} within "
                                       f"{within_s:g} s of the rack's routes")
    return round(time.time() - since, 2)


def rack_of(old: FabricSpec, grown: FabricSpec):
    """The :class:`~testbed.acceptance.run.Rack` ``grown`` adds to ``old``."""
    from testbed.acceptance.run import Rack

    names = {sw.name for sw in old.switches}
    return Rack({sw.name for sw in grown.switches if sw.name not in names},
                {h.name for h in grown.hosts[len(old.hosts):]},
                {link_name(grown, lk) for lk in grown.links if lk not in set(old.links)})


def planted_in(old: FabricSpec, leaves: int, nodes: int, plant: list[dict],
               seed: int, where: str = "--plant") -> list[dict]:
    """The faults to plant in the rack before its acceptance, targets drawn with
    ``seed`` from the rack's own links and NICs (:func:`testbed.acceptance.step.place`);
    checked before anything is made."""
    from testbed.acceptance.step import place

    grown = grown_spec(old, leaves, nodes)
    return place(rack_of(old, grown).view(grown), plant, [], seed, where)


def refuse(live) -> None:
    """:class:`ConfigError` for a fabric a rack cannot join yet, before anything is
    made: routing the rack restarts the lab's own controller; the PFC agents and the
    phantom-queue marker are started per host and port at bring-up, not for a rack."""
    if live.controller is None:
        raise ConfigError("LAB", "a rack is routed by restarting the lab's controller; this "
                                 "fabric runs a remote one")
    if (Path(live.status).parent / layout.PFC_STORMS).is_dir():
        raise ConfigError("LAB", "racks are not added to a fabric with PFC (qos.pfc): its "
                                 "agents run per host from the start")
    if live.phantom_table:
        raise ConfigError("LAB", "racks are not added to a fabric whose ECN marks come from "
                                 "the phantom-queue marker (controller.ecn.backend)")


def expand(live, stack: ExitStack, out: Path, name: str, leaves: int, nodes: int,
           checks: list[str] | None = None,
           progress: Callable[[str], None] = lambda _: None, *,
           plant: list[dict] = (), seed: int = 1) -> tuple[dict, list[str]]:
    """Add a rack to the running fabric ``live`` (see the module's text), ``plant``'s
    faults made in it before its acceptance (as a new rack may come); returns the
    record (also ``out/expansion.json``) and the lines to print."""
    from testbed.acceptance.exclude import excluded_nodes, restart_on
    from testbed.acceptance.run import Lab, accept
    from testbed.acceptance.step import score
    from testbed.faults.fabric import FabricFaults

    old = live.spec
    refuse(live)
    grown = grown_spec(old, leaves, nodes)
    planted = planted_in(old, leaves, nodes, list(plant), seed)
    config = json.loads((out / layout.CONTROLLER_CONFIG).read_text())
    routed_before = FabricSpec.from_json(Path(config["spec"]))
    probes = OldFabricProbes(old, live.fabric.host_pid)
    probes.start()
    record: dict = {"leaves": leaves, "nodes": nodes, "t": time.time()}
    try:
        t0 = time.monotonic()
        live.fabric.grow(grown)
        record["cabled_s"] = round(time.monotonic() - t0, 2)
        grown.to_json(out / layout.SPEC)  # what inspect, exec and capture read
        rack = rack_of(old, grown)
        record["added"] = {"switches": sorted(short(grown, s) for s in rack.switches),
                           "nodes": [short(grown, h.name) for h in grown.hosts
                                     if h.name in rack.hosts],
                           "links": len(rack.links)}
        progress(f"{name}: rack cabled in {record['cabled_s']:g} s "
                 f"({', '.join(record['added']['switches'])}; "
                 f"{', '.join(record['added']['nodes'])}); acceptance on the rack")
        if planted:
            actions = FabricFaults(live, stack).actions()
            for f in planted:
                actions[f["action"]](f["target"], **{k: v for k, v in f.items()
                                                     if k not in ("at_s", "action", "target")})
            record["planted"] = planted
            progress(f"{name}: planted in the rack: " + "; ".join(
                f"{f['action']} {f['target']}" for f in planted))

        def admit(excluded: list[str]) -> dict:
            """Route the rack: the controller again on the grown fabric, without what
            the rack's acceptance excluded and what was excluded before."""
            judged = time.time()
            gone = set(excluded)
            kept = set(routed_before.links)
            routed = dataclasses.replace(grown, links=tuple(
                lk for lk in grown.links
                if (lk in kept or lk not in set(old.links))
                and link_name(grown, lk) not in gone))
            done = restart_on(live, stack, out, routed, GROWN_SPEC, "routing a rack")
            out_nodes = set(excluded_nodes(grown, excluded))
            reach = [h.name for h in grown.hosts
                     if h.name in rack.hosts and short(grown, h.name) not in out_nodes]
            done["traffic_after_s"] = first_traffic(live, grown, reach, judged)
            done["links_removed"] = sorted(
                link_name(grown, lk) for lk in grown.links
                if lk.kind == "fabric" and link_name(grown, lk) in gone)
            progress(f"{name}: rack routed; its nodes reach the old fabric "
                     f"{done['traffic_after_s']:g} s after its verdict")
            return done

        lab = Lab.of(live, out, name)
        result, lines = accept(lab, checks, admit, rack)
        record["acceptance"] = {k: result[k] for k in (
            "accepted", "excluded_links", "excluded_switches", "excluded_nodes", "system",
            "unexplained")}
        record["routed"] = result["rerouted"]
        if planted:
            record["score"] = score(grown, planted, result)
            lines.append(f"planted in the rack: {len(planted)}; found "
                         f"{', '.join(record['score']['found']) or 'nothing'}; missed "
                         f"{', '.join(record['score']['missed']) or 'nothing'}; extra "
                         f"{', '.join(record['score']['extra']) or 'nothing'}")
    finally:
        record["old_fabric"] = probes.stop()
    write_json(out / RECORD, record)
    old_fabric = record["old_fabric"]
    lines.append(f"old fabric: {old_fabric['lost']} of {old_fabric['sent']} probes lost "
                 f"({len(old_fabric['pairs'])} pairs, {old_fabric['pps_per_pair']}/s each, "
                 f"{old_fabric['seconds']:g} s)")
    if record["routed"]:
        lines.append(f"rack routed: controller on the grown fabric in "
                     f"{record['routed']['restart_s']:g} s; its nodes reach the old fabric "
                     f"{record['routed']['traffic_after_s']:g} s after the rack's verdict")
    return record, lines
