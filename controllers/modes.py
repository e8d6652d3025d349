"""The built-in routing modes (:mod:`controllers.routing`).

- ``ecmp``: the base routes' hash alone; nothing placed.
- ``adaptive``: flow placement and elephant moves (:mod:`controllers.adaptive`) at every
  switch whose route to a destination has several next hops (its ECMP set).
- ``gff``: Hedera's global first fit (:mod:`controllers.gff`): flows stay on their hash,
  each with a counting rule at its edge switch, until they are elephants; then each is
  placed on the first whole path with room for its estimated demand.
- ``spray``: RoCE packets choose their next hop in that set by the low bits of the UDP
  source port, which the senders rotate per packet (:mod:`controllers.spray`).
"""

from __future__ import annotations

from collections import Counter

from controllers import adaptive, ecmp, ecn, gff, spray
from controllers.routing import RoutingMode


class Ecmp(RoutingMode):
    NAME = "ecmp"
    DESCRIPTION = "static hash"


class Adaptive(RoutingMode):
    NAME = "adaptive"
    DESCRIPTION = "per-switch placement and elephant moves"
    PLACES = True
    KEEPS_PINS = True

    def __init__(self, app) -> None:
        super().__init__(app)
        #: per switch: where each flow it placed or counted last goes (flow -> port)
        self.placed: dict[int, dict[adaptive.FlowKey, int]] = {}
        #: per switch: flows moved lately (flow -> the tick they may move again)
        self.frozen: dict[int, dict[adaptive.FlowKey, int]] = {}
        #: per switch: the tick before which no move is decided (the last one is not in
        #: the utilisation figures yet)
        self.hold: dict[int, int] = {}

    def places_at(self, dpid: int) -> bool:
        return True

    def on_samples(self, dp, samples) -> None:
        app = self.app
        if not (app.sets[dp.id] and samples and app.tick_no >= self.hold.get(dp.id, 0)):
            return
        for ports in {tuple(p) for p in app.sets[dp.id].values()}:
            util = [app.util.get((dp.id, p), 0.0) for p in ports]
            if max(util) - min(util) > app.cfg.adaptive.imbalance:
                app.request_flow_stats(dp)  # imbalanced: decide now, not at the next poll
                return

    def on_new_flow(self, dp, key, uplinks) -> None:
        app = self.app
        # the whole path counts: flows of other switches placed through the same links
        # (on a leaf-spine: the same spine downlink) collide with this one as surely as
        # flows on the same uplink
        taken = Counter(link for d, flows in self.placed.items() for k, p in flows.items()
                        for link in app.paths.links(d, p, k.dst))
        counts = {p: max(taken[link] for link in app.paths.links(dp.id, p, key.dst))
                  for p in uplinks}
        load = {p: app.paths.load(app.util, dp.id, p, key.dst) for p in uplinks}
        port = adaptive.least_loaded(load, counts)
        self.placed.setdefault(dp.id, {})[key] = port
        app.pin_flow(dp, key, port, dp.ofproto.OFPFC_ADD)
        app.status.emit("flow_placed", flow=str(key), switch=app.plans[dp.id].name,
                        port=port)

    def on_flow_loads(self, dp, loads) -> None:
        self.placed[dp.id] = {f.key: f.port for f in loads}
        self.rebalance(dp, loads)

    def beyond_uplink(self, dpid: int, uplink: int, dst: str) -> float:
        """Load of the path a flow to ``dst`` takes after ``uplink`` (on a leaf-spine:
        the spine's downlink to the destination's leaf); the uplink itself left out."""
        return self.app.paths.load(self.app.util, dpid, uplink, dst, first=False)

    def rebalance(self, dp, loads: list[adaptive.FlowLoad]) -> None:
        app = self.app
        if app.tick_no < self.hold.get(dp.id, 0):
            return  # the last move is not in the utilisation figures yet
        frozen = self.frozen.setdefault(dp.id, {})
        for key in [k for k, until in frozen.items() if until <= app.tick_no]:
            del frozen[key]
        move = None
        by_set: dict[tuple[int, ...], list[adaptive.FlowLoad]] = {}
        for f in loads:  # flows choose among their own destination's ECMP set
            if f.key.dst in app.sets[dp.id]:
                by_set.setdefault(tuple(app.sets[dp.id][f.key.dst]), []).append(f)
        for uplinks, flows in by_set.items():
            util = {p: app.util.get((dp.id, p), 0.0) for p in uplinks}
            downlink = {f.key: {p: self.beyond_uplink(dp.id, p, f.key.dst) for p in uplinks}
                        for f in flows}
            move = adaptive.plan_move(util, flows, link_mbps=app.spec.link_mbps,
                                      imbalance=app.cfg.adaptive.imbalance,
                                      elephant_mbps=app.cfg.adaptive.elephant_mbps,
                                      frozen=frozenset(frozen), downlink=downlink)
            if move is not None:
                break
        if move is None:
            return
        app.pin_flow(dp, move.key, move.to_port, dp.ofproto.OFPFC_MODIFY_STRICT)
        ticks = lambda s: max(2, round(s * 1000 / app.interval_ms))  # noqa: E731
        frozen[move.key] = app.tick_no + ticks(adaptive.FREEZE_S)
        self.hold[dp.id] = app.tick_no + ticks(adaptive.HOLD_S)
        self.placed.setdefault(dp.id, {})[move.key] = move.to_port
        app.status.emit("flow_moved", flow=str(move.key), switch=app.plans[dp.id].name,
                        from_port=move.from_port, to_port=move.to_port, mbps=move.mbps,
                        reason=move.reason)


class Gff(RoutingMode):
    NAME = "gff"
    DESCRIPTION = "Hedera's global first fit for elephants"
    PLACES = True
    EVERY_TCP = True  # a flow comes back to it after a restart through any TCP packet

    def __init__(self, app) -> None:
        super().__init__(app)
        #: host addresses behind each switch (where flows are counted and placed)
        self.attached: dict[int, set[str]] = {}
        for intf in app.spec.interfaces():
            self.attached.setdefault(app.spec.switch(intf.switch).dpid, set()).add(intf.ip)
        #: the elephants seen (key -> (src, dst)) and the scheduler's placements
        self.elephants: dict[adaptive.FlowKey, tuple[str, str]] = {}
        self.scheduler = gff.Scheduler()

    def places_at(self, dpid: int) -> bool:
        return dpid in self.attached

    def on_new_flow(self, dp, key, uplinks) -> None:
        if key.src not in self.attached.get(dp.id, ()):
            return  # counted where it enters the fabric, not on its way
        # a rule of its own on the same hash: the flow's counters, its path unchanged
        parser = dp.ofproto_parser
        self.app.add_flow(dp, adaptive.PRIORITY_FLOW, flow_match(parser, key),
                          [ecmp.spread(parser, uplinks)],
                          cookie=adaptive.COOKIE_FLOW, idle=adaptive.FLOW_IDLE_S)

    def on_flow_loads(self, dp, loads) -> None:
        """One global-first-fit round after an edge switch's counters came in: flows
        gone release their reservations, flows above ``elephant_mbps`` become elephants,
        and the elephants not placed yet get the first path with room (:mod:`gff`)."""
        app = self.app
        mine = {f.key for f in loads if f.key.src in self.attached[dp.id]}
        gone = [k for k in self.elephants
                if k.src in self.attached[dp.id] and k not in mine]
        for key in gone:
            del self.elephants[key]
        self.scheduler.forget(gone)
        for f in loads:
            if f.key in mine and f.mbps >= app.cfg.adaptive.elephant_mbps:
                self.elephants[f.key] = (f.key.src, f.key.dst)
        paths = {k: app.paths.paths(dp.id, k.dst) for k in self.elephants
                 if k in mine and k not in self.scheduler.placed}
        if not paths:
            return
        for key, choice, demand in self.scheduler.schedule(self.elephants, paths):
            path = paths[key][choice]
            # downstream first: the edge's rule moves the flow onto the path last, so no
            # packet reaches an aggregation switch before its rule does
            for dpid, port in reversed(path):
                hop = app.datapaths.get(dpid)
                if hop is None or key.dst not in app.sets[dpid]:
                    continue  # no choice there: the path goes on by itself
                command = (hop.ofproto.OFPFC_MODIFY_STRICT if dpid == dp.id
                           else hop.ofproto.OFPFC_ADD)  # the edge's rule keeps its counters
                app.pin_flow(hop, key, port, command)
            names = [f"{app.plans[d].name}:{p}" for d, p in path]
            app.status.emit("flow_placed", flow=str(key), switch=app.plans[dp.id].name,
                            port=path[0][1], path=names, demand=demand, scheduler="gff")


class Spray(RoutingMode):
    NAME = "spray"
    DESCRIPTION = "per-packet spreading of RoCE"

    def install(self, dp, plan) -> None:
        """RoCE source-port buckets over each route's ECMP set (:mod:`controllers.spray`);
        with controller marking, ECN-capable packets go through one marking group per
        port instead."""
        app, parser = self.app, dp.ofproto_parser
        for rule in spray.spray_rules(plan):
            app.add_flow(dp, spray.PRIORITY_SPRAY, parser.OFPMatch(**rule.match()),
                         [ecmp.prefer(parser, rule.port, list(rule.members))])
        if not app.cfg.controller_marks:
            return
        for rule in spray.spray_rules(plan, ect=True):
            app.add_flow(dp, spray.PRIORITY_SPRAY + 1, parser.OFPMatch(**rule.match()),
                         [parser.OFPActionGroup(ecn.mark_group("collective", rule.port))])


def flow_match(parser, key: adaptive.FlowKey, **extra):
    """The OpenFlow match of flow ``key``'s packets (``extra``: more fields)."""
    l4 = "tcp" if key.proto == 6 else "udp"
    return parser.OFPMatch(**{"eth_type": ecn.ETH_IPV4, "ip_proto": key.proto,
                              "ipv4_src": key.src, "ipv4_dst": key.dst,
                              f"{l4}_src": key.sport, f"{l4}_dst": key.dport, **extra})
