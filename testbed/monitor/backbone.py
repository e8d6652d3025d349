"""What a backbone lab shows: every link's traffic each way and carrier (netlink dumps of
every router's namespace, once a second), each region's transit (its access links),
and the routing state FRR reports (OSPF adjacencies Full, BFD sessions up, BGP sessions
Established; ``vtysh`` in each router, every :data:`ROUTING_EVERY_S` seconds), plus
the faults applied by hand; on protected links, each end's MACsec SecY counters (the
userspace forwarders' stats files, or ``ip -s macsec`` of a kernel SecY) on the same
beat as the routing state.

The lab describes itself for the monitor in ``monitor-backbone.json`` (:func:`describe`):
routers with their namespace, vty folder and place (PoPs by area, regions), links with
the interface of each end and their capacity.
"""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from testbed.backbone.secure import COUNTERS
from testbed.core import layout
from testbed.host.netlink import LinkCounters, LinkReader, route_socket
from testbed.macsec.forwarder import stats_path
from testbed.macsec.kernel import macsec_stats_argv, parse_ip_macsec_stats
from testbed.monitor import panels
from testbed.monitor.tail import Tail
from topologies.backbone import AREAS as BACKBONE_AREAS

ROUTING_EVERY_S = 5.0
VTY_TIMEOUT_S = 5.0
#: the map's columns, west to east: the areas a PoP may be in
AREAS = BACKBONE_AREAS


def describe(bb, net, protocol: str, folder: Path) -> dict:
    """What the monitor needs of a running backbone (written by the lab)."""
    pops = {p.name: p for p in bb.pops}
    nodes = [{"id": n, "role": "pop" if n in pops else "region",
              "area": pops[n].area if n in pops else None,
              "pops": [] if n in pops else list(next(r.pops for r in bb.regions
                                                     if r.name == n)),
              "netns": net.ns(n), "vty": str(folder / "frr" / n)} for n in bb.nodes]
    links = [{"id": name, "a": lk.a, "b": lk.b, "a_if": net.ifname(name, "a"),
              "b_if": net.ifname(name, "b"), "mbps": lk.capacity_mbps, "km": lk.length_km,
              "kind": lk.kind, "macsec": _macsec_ends(net, name)}
             for name, (_, lk) in net.links.items()]
    return {"kind": "backbone", "protocol": protocol, "nodes": nodes, "links": links}


def _macsec_ends(net, name: str) -> dict | None:
    """Where each end of a protected link keeps its SecY counters; None unprotected."""
    secure = net.secure
    if secure is None or name not in secure.configs:
        return None
    cfg = secure.configs[name]
    return {s: {"backend": secure.backend, "netns": cfg.side(s).netns, "tap": cfg.side(s).tap,
                "stats": str(stats_path(secure.link_dir(name), s))} for s in "ab"}


def macsec_counters(end: dict) -> dict[str, int]:
    """One link end's SecY counters (:data:`testbed.backbone.secure.COUNTERS`)."""
    if end["backend"] == "kernel":
        try:
            done = subprocess.run(["ip", "netns", "exec", end["netns"],
                                   *macsec_stats_argv(end["tap"])],
                                  capture_output=True, text=True, timeout=VTY_TIMEOUT_S)
            full = parse_ip_macsec_stats(done.stdout)
        except (subprocess.TimeoutExpired, OSError, ValueError):
            return {}
    else:
        try:
            full = json.loads(Path(end["stats"]).read_text()).get("counters", {})
        except (OSError, ValueError):
            return {}
    return {k: int(full[k]) for k in COUNTERS if k in full}


def topology(desc: dict) -> dict:
    nodes = [{"id": n["id"], "type": n["role"], "area": n["area"], "pops": n["pops"]}
             for n in desc["nodes"]]
    links = [{k: lk[k] for k in ("id", "a", "b", "mbps", "km", "kind")} for lk in desc["links"]]
    return {"kind": "backbone", "areas": list(AREAS), "nodes": nodes, "links": links,
            "panels": panels.as_json(panels.BACKBONE)}


class BackboneWatch:
    KIND = "backbone"

    def __init__(self, desc: dict, out: Path, *, readers: dict | None = None) -> None:
        self.desc, self.out = desc, out
        self.topo = topology(desc)
        self.readers = readers or {
            n["id"]: LinkReader(route_socket(f"/run/netns/{n['netns']}"))
            for n in desc["nodes"]}
        self.prev: dict[tuple[str, str], tuple[float, LinkCounters]] = {}
        self.link_up: dict[str, bool] = {}
        self.faults = Tail(out / layout.LAB_FAULTS)
        self.routing: dict[str, dict] = {}
        self.routing_at = 0.0
        self.answer: tuple[dict, dict] | None = None  # ask()'s, for the next sample
        self.macsec: dict[tuple[str, str], dict[str, int]] = {}  # (link, router): counters
        self.latest: dict = {"t": 0.0, "links": {}, "routers": {}}

    def topology(self) -> dict:
        return self.topo

    def _vty(self, node: dict, command: str) -> dict | list | None:
        try:
            done = subprocess.run(["ip", "netns", "exec", node["netns"], "vtysh",
                                   "--vty_socket", node["vty"], "-c", command],
                                  capture_output=True, text=True, timeout=VTY_TIMEOUT_S)
            return json.loads(done.stdout) if done.returncode == 0 else None
        except (subprocess.TimeoutExpired, OSError, ValueError):
            return None

    def _routing(self) -> dict[str, dict]:
        """Per router: OSPF adjacencies Full (or BGP sessions Established), BFD up."""
        out = {}
        for node in self.desc["nodes"]:
            state: dict = {}
            if self.desc["protocol"] == "bgpd":
                summary = self._vty(node, "show bgp ipv4 unicast summary json") or {}
                state["bgp_established"] = sum(
                    p.get("state") == "Established" for p in summary.get("peers", {}).values())
            else:
                nbrs = self._vty(node, "show ip ospf neighbor json") or {}
                state["ospf_full"] = sum(
                    str(n.get("nbrState", "")).startswith("Full")
                    for entries in nbrs.get("neighbors", {}).values() for n in entries)
            peers = self._vty(node, "show bfd peers json")
            if isinstance(peers, list):
                state["bfd_up"] = sum(p.get("status") == "up" for p in peers)
            out[node["id"]] = state
        return out

    def ask(self, now: float | None = None) -> None:
        """Every :data:`ROUTING_EVERY_S`: ask FRR for each router's routing state and read
        the protected links' MACsec counters (seconds of vtysh and ip calls, so the
        monitor does this outside the lock its page waits on); the next sample takes it."""
        now = time.time() if now is None else now
        if now - self.routing_at < ROUTING_EVERY_S:
            return
        self.routing_at = now
        macsec = {}
        for lk in self.desc["links"]:
            for side, end in (lk.get("macsec") or {}).items():
                counters = macsec_counters(end)
                if counters:
                    macsec[(lk["id"], lk[side])] = counters
        self.answer = (self._routing(), macsec)

    def sample(self, timeline, now: float | None = None) -> dict:
        now = time.time() if now is None else now
        counters = {node: r.read() for node, r in self.readers.items()}
        links, down = {}, 0
        for lk in self.desc["links"]:
            ends = {}
            for side in "ab":
                c = counters.get(lk[side], {}).get(lk[f"{side}_if"])
                if c is None:
                    continue
                key = (lk[side], lk[f"{side}_if"])
                last = self.prev.get(key)
                rate = 0.0
                if last is not None and now > last[0]:
                    rate = max(0, c.tx_bytes - last[1].tx_bytes) * 8 / (now - last[0]) / 1e6
                self.prev[key] = (now, c)
                ends[side] = (c, rate)
            if not ends:
                continue
            ab = ends["a"][1] / lk["mbps"] if "a" in ends and lk["mbps"] else 0.0
            ba = ends["b"][1] / lk["mbps"] if "b" in ends and lk["mbps"] else 0.0
            up = all(c.running for c, _ in ends.values())
            links[lk["id"]] = {"ab": round(min(1.0, ab), 4), "ba": round(min(1.0, ba), 4),
                               "util": round(min(1.0, max(ab, ba)), 4), "up": up,
                               "tx_bytes": {s: c.tx_bytes for s, (c, _) in ends.items()},
                               "rx_bytes": {s: c.rx_bytes for s, (c, _) in ends.items()},
                               "mbps": {s: round(r, 3) for s, (_, r) in ends.items()}}
            down += not up
            if self.link_up.get(lk["id"], True) != up:
                timeline.event(now, "link", f"{lk['id']} {'up' if up else 'down'}")
            self.link_up[lk["id"]] = up
        transit_mbps = 0.0
        for lk in self.desc["links"]:  # a region's access links, seen from the region
            s = links.get(lk["id"])
            if lk["kind"] == "access" and s:
                transit_mbps += s["mbps"].get("a", 0.0)
        for e in self.faults.read():
            timeline.event(e.get("t", now), "fault", e.get("text", e.get("kind", "fault")))
        if self.answer is not None:  # what ask() got from the routers
            before = self.routing
            self.routing, macsec = self.answer
            self.macsec.update(macsec)
            self.answer = None
            for node, state in self.routing.items():
                for key, n in state.items():
                    old = before.get(node, {}).get(key)
                    if old is not None and old != n:
                        timeline.event(now, "routing", f"{node}: {key} {old} -> {n}")
        utils = [s["util"] for s in links.values()]
        point = {"link_util_max": round(max(utils), 4) if utils else None,
                 "links_down": down, "transit_mbps": round(transit_mbps, 3),
                 "ospf_full": sum(s.get("ospf_full", 0) for s in self.routing.values()),
                 "bgp_established": sum(s.get("bgp_established", 0)
                                        for s in self.routing.values()),
                 "bfd_up": sum(s.get("bfd_up", 0) for s in self.routing.values())}
        timeline.add(now, point)
        self.latest = {"t": round(now, 3), "links": links, "routers": self.routing}
        return self.latest


class BackboneCollector:
    """prometheus_client collector over a :class:`BackboneWatch`."""

    def __init__(self, watch: BackboneWatch) -> None:
        self.watch = watch

    def collect(self):
        w = self.watch
        ends = {lk["id"]: lk for lk in w.desc["links"]}
        labels = ["link", "router", "kind"]
        sent = CounterMetricFamily("testbed_backbone_transmit_bytes", "bytes a router sent "
                                   "on the link", labels=labels)
        received = CounterMetricFamily("testbed_backbone_receive_bytes", "bytes a router "
                                       "received on the link", labels=labels)
        util = GaugeMetricFamily("testbed_link_utilization", "the link's rate over its "
                                 "capacity, last second, each way",
                                 labels=["link", "kind", "direction"])
        up = GaugeMetricFamily("testbed_link_up", "1 while both ends of the link carry",
                               labels=["link", "kind"])
        transit = CounterMetricFamily("testbed_region_transit_bytes", "bytes a region sent "
                                      "into the backbone (out) and received from it (in)",
                                      labels=["region", "direction"])
        totals: dict[tuple[str, str], int] = {}
        for name, s in w.latest["links"].items():
            lk = ends[name]
            for side in s["tx_bytes"]:
                values = [name, lk[side], lk["kind"]]
                sent.add_metric(values, s["tx_bytes"][side])
                received.add_metric(values, s["rx_bytes"][side])
            for direction in ("ab", "ba"):
                util.add_metric([name, lk["kind"], direction], s[direction])
            up.add_metric([name, lk["kind"]], float(s["up"]))
            if lk["kind"] == "access" and "a" in s["tx_bytes"]:  # a: the region's end
                for direction, key in (("out", "tx_bytes"), ("in", "rx_bytes")):
                    k = (lk["a"], direction)
                    totals[k] = totals.get(k, 0) + s[key]["a"]
        for (region, direction), n in sorted(totals.items()):
            transit.add_metric([region, direction], n)
        yield from (sent, received, util, up, transit)
        for key, name, doc in (
                ("ospf_full", "testbed_ospf_neighbors_full", "OSPF adjacencies Full"),
                ("bgp_established", "testbed_bgp_sessions_established",
                 "BGP sessions Established"),
                ("bfd_up", "testbed_bfd_sessions_up", "BFD sessions up")):
            family = GaugeMetricFamily(name, f"the router's {doc}", labels=["router"])
            for router, state in sorted(w.routing.items()):
                if key in state:
                    family.add_metric([router], state[key])
            yield family
        macsec = CounterMetricFamily("testbed_macsec_packets", "a link end's MACsec SecY "
                                     "counters (IEEE 802.1AE names: OutPktsProtected, "
                                     "InPktsOK, InPktsLate, InPktsNotValid ...)",
                                     labels=["link", "router", "counter"])
        for (link, router), counters in sorted(w.macsec.items()):
            for name, n in counters.items():
                macsec.add_metric([link, router, name], n)
        yield macsec
