"""os-ken app: the fabric routing app plus failure handling (recompute, fast failover,
health drains) and a resync after a restart that never flushes working flows.

Switched per variant (the configuration file's ``fast_failover``, ``recompute`` and
``health``, :mod:`controllers.config`):

* ``fast_failover``: spines (every switch whose route has one next hop) forward through
  fast-failover groups, and packets bounced back to a switch go out over the other
  members of its ECMP set (see :mod:`controllers.failover`); local repair, no
  controller needed.
* ``recompute``: on a port-status change of a fabric link, every switch's plan is
  recomputed without that link and the differences are sent (flow ADD of the same
  match, which OVS applies in place, for every rule whose route or ECMP set changed);
  never a delete.
* ``health``: every ``interval_ms`` the app sends ``probes`` link probes each way on
  every switch-to-switch link (packet-out; the far switch returns them as packet-in); a link
  whose probe loss crosses ``loss_threshold`` is drained like a dead one
  (:mod:`controllers.health`).

On connect the app first asks the switch for its port descriptions, so a restarted
controller learns which links died while it was away, then installs the plan the same
way (adds that overwrite in place, groups modified when they exist).

Events (the ``status`` JSON lines): ``port_status``, ``recomputed``, ``drain``,
``health`` (the loss of every link, each sample), plus the base app's events.
"""

from __future__ import annotations

import threading
import time

from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.lib import hub

from controllers import ecmp
from controllers.fabric_app import ETH_ARP, ETH_IPV4, FabricRouting
from controllers.failover import (
    BOUNCED_MAC,
    PRIORITY_BOUNCE,
    FailoverPlan,
    link_edges,
    plan_failover,
)
from controllers.health import PROBE_ETHERTYPE, HealthMonitor, decode_probe, encode_probe
from controllers.paths import PRIORITY_HOST

PRIORITY_PROBE = PRIORITY_BOUNCE + 10
PROBES_PER_ROUND = 1000  # probe sequence numbers: round * PROBES_PER_ROUND + i


def _rule(plan: FailoverPlan, route) -> tuple:
    """What a route's rule does: output to a port, or hash over a set of ports."""
    return ("output", route.port) if route.group is None else ("hash", *plan.members(route))


class ResilientRouting(FabricRouting):
    """:class:`FabricRouting` that reacts to dead and degraded links."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fast_failover = self.cfg.fast_failover
        self.recompute = self.cfg.recompute
        health = self.cfg.health
        self.edges = link_edges(self.spec)
        self.names = {sw.dpid: sw.name for sw in self.spec.switches}
        self.dpids = {sw.name: sw.dpid for sw in self.spec.switches}
        self.down_ports: set[tuple[str, int]] = set()
        self.datapaths: dict[int, object] = {}
        self.lock = threading.RLock()
        self.health = None
        if health.enabled:
            self.health = HealthMonitor(self.spec, loss_threshold=health.loss_threshold,
                                        min_packets=health.min_packets,
                                        samples=health.samples)
            self.health_interval = health.interval_ms / 1000
            self.probes = health.probes
            self._probe_sent: dict[int, dict] = {}  # round -> (edge, direction) -> count
            self._probe_got: dict[int, dict] = {}
            hub.spawn(self._poll_health)
        self.status.emit("failover", fast_failover=self.fast_failover, recompute=self.recompute,
                         health=bool(self.health))

    # -- plan --------------------------------------------------------------------------
    def down_edges(self) -> set[tuple[str, str]]:
        """Fabric links avoided: a dead port at either end (when recomputing), drained."""
        down = {self.edges[p] for p in self.down_ports if p in self.edges} if self.recompute \
            else set()
        if self.health:
            down |= self.health.drained
        return down

    def plan_for(self, dpid: int) -> FailoverPlan:
        return plan_failover(self.spec, dpid, down=self.down_edges(),
                             fast_failover=self.fast_failover)

    # -- connect: learn port state, then install -----------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev) -> None:
        dp = ev.msg.datapath
        # os-ken's own handler sets the id in its own event thread, which may run after
        # this app's: taken from the message, a switch is never unknown for that race
        dp.id = ev.msg.datapath_id
        if dp.id not in self.names:
            self.status.emit("unknown_switch", dpid=dp.id)
            return
        self.status.emit("connected", dpid=dp.id, name=self.names[dp.id])
        dp.send_msg(dp.ofproto_parser.OFPPortDescStatsRequest(dp, 0))

    @set_ev_cls(ofp_event.EventOFPPortDescStatsReply, MAIN_DISPATCHER)
    def on_port_desc(self, ev) -> None:
        dp = ev.msg.datapath
        name = self.names.get(dp.id)
        if name is None:
            return
        with self.lock:
            for port in ev.msg.body:
                self._set_port(name, port.port_no, self._is_down(dp, port))
            self.datapaths[dp.id] = dp
            plan = self.plans[dp.id] = self.plan_for(dp.id)
            self.install(dp, plan)
        if self.down_edges():
            self._push_all("connect")

    @staticmethod
    def _is_down(dp, port) -> bool:
        ofp = dp.ofproto
        return bool(port.state & ofp.OFPPS_LINK_DOWN or port.config & ofp.OFPPC_PORT_DOWN)

    def _set_port(self, name: str, port_no: int, down: bool) -> bool:
        key = (name, port_no)
        was = key in self.down_ports
        if down:
            self.down_ports.add(key)
        else:
            self.down_ports.discard(key)
        return was != down

    # -- install -----------------------------------------------------------------------
    def install(self, dp, plan: FailoverPlan) -> None:  # type: ignore[override]
        """Send the whole plan as adds (in place on a switch that already has it)."""
        parser = dp.ofproto_parser
        dp.send_msg(parser.OFPFlowMod(dp, priority=0, match=parser.OFPMatch(), instructions=[]))
        self._send_groups(dp, plan, dp.ofproto.OFPGC_ADD)
        self._send_routes(dp, plan, plan.routes)
        self._send_bounces(dp, plan)
        if self.health:
            self._install_probe_catch(dp)
        request = parser.OFPBarrierRequest(dp)
        dp.set_xid(request)
        self.pending_barrier[dp.id] = request.xid
        dp.send_msg(request)

    def _send_groups(self, dp, plan: FailoverPlan, command: int) -> None:
        """The spines' fast-failover groups (ECMP sets are flow actions, not groups)."""
        for gid, ports in plan.ff_groups.items():
            dp.send_msg(self.ff_group_mod(dp, command, gid, ports))

    @staticmethod
    def ff_group_mod(dp, command: int, group_id: int, buckets: list[tuple[int, int]]):
        ofp, parser = dp.ofproto, dp.ofproto_parser
        buckets = [parser.OFPBucket(watch_port=watch, watch_group=ofp.OFPG_ANY,
                                    actions=[parser.OFPActionOutput(port)])
                   for port, watch in buckets]
        return parser.OFPGroupMod(dp, command, ofp.OFPGT_FF, group_id, buckets)

    def _send_routes(self, dp, plan: FailoverPlan, routes) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        for route in routes:
            inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                                 [self.route_action(parser, plan, route)])]
            for match in (parser.OFPMatch(eth_type=ETH_IPV4, ipv4_dst=route.ip),
                          parser.OFPMatch(eth_type=ETH_ARP, arp_tpa=route.ip)):
                dp.send_msg(parser.OFPFlowMod(dp, priority=PRIORITY_HOST, match=match,
                                              instructions=inst))

    def _send_bounces(self, dp, plan: FailoverPlan) -> None:
        """Spine fast-failover routes, ARP guards and leaf bounces."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        for in_port, ip, group in plan.ff_routes:
            inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS,
                                                 [parser.OFPActionGroup(group)])]
            for match in (parser.OFPMatch(in_port=in_port, eth_type=ETH_IPV4, ipv4_dst=ip),
                          parser.OFPMatch(in_port=in_port, eth_type=ETH_ARP, arp_tpa=ip)):
                dp.send_msg(parser.OFPFlowMod(dp, priority=PRIORITY_BOUNCE, match=match,
                                              instructions=inst))
        for port, ip in plan.arp_guards:
            match = parser.OFPMatch(in_port=port, eth_type=ETH_ARP, eth_src=BOUNCED_MAC,
                                    arp_tpa=ip)
            dp.send_msg(parser.OFPFlowMod(dp, priority=PRIORITY_BOUNCE + 5, match=match,
                                          instructions=[]))
        self._send_bounce_rules(dp, plan, plan.bounces)

    @staticmethod
    def _send_bounce_rules(dp, plan: FailoverPlan, bounces) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        for b in bounces:
            up = ecmp.spread(parser, plan.groups[b.group])
            if b.arp:
                match = parser.OFPMatch(in_port=b.in_port, eth_type=ETH_ARP, arp_tpa=b.ip)
                actions = [parser.OFPActionSetField(eth_src=BOUNCED_MAC), up]
            else:
                match = parser.OFPMatch(in_port=b.in_port, eth_type=ETH_IPV4, ipv4_dst=b.ip)
                actions = [parser.OFPActionDecNwTtl(), up]
            inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
            dp.send_msg(parser.OFPFlowMod(dp, priority=PRIORITY_BOUNCE, match=match,
                                          instructions=inst))

    def _push_all(self, cause: str) -> None:
        """Recompute every connected switch's plan and send only what changed."""
        t0 = time.time()
        changed = []
        with self.lock:
            for dpid, dp in list(self.datapaths.items()):
                old, new = self.plans.get(dpid), self.plan_for(dpid)
                if old is None:
                    continue
                # ECMP sets live in the rules that use them (ids may be renumbered):
                # send again every rule whose ports changed
                was = {r.ip: _rule(old, r) for r in old.routes}
                routes = [r for r in new.routes if was.get(r.ip) != _rule(new, r)]
                bounced = {(b.in_port, b.ip, b.arp): old.bounce_members(b) for b in old.bounces}
                bounces = [b for b in new.bounces
                           if bounced.get((b.in_port, b.ip, b.arp)) != new.bounce_members(b)]
                self._send_routes(dp, new, routes)
                self._send_bounce_rules(dp, new, bounces)
                self.plans[dpid] = new
                if routes or bounces:
                    dp.send_msg(dp.ofproto_parser.OFPBarrierRequest(dp))
                    changed.append(self.names[dpid])
        self.status.emit("recomputed", cause=cause, since=t0, switches=changed,
                         down=sorted(map(list, self.down_edges())))

    # -- events ------------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPortStatus, MAIN_DISPATCHER)
    def on_port_status(self, ev) -> None:
        dp, desc = ev.msg.datapath, ev.msg.desc
        name = self.names.get(dp.id)
        if name is None:
            return
        down = self._is_down(dp, desc)
        edge = self.edges.get((name, desc.port_no))
        with self.lock:
            changed = self._set_port(name, desc.port_no, down)
        if not changed:
            return
        self.status.emit("port_status", dpid=dp.id, name=name, port=desc.port_no,
                         up=not down, link=list(edge) if edge else None)
        if edge and self.recompute:
            self._push_all(f"port {name}:{desc.port_no} {'down' if down else 'up'}")

    def resync_groups(self, dp, plan: FailoverPlan) -> None:
        """After a restart: modify the failover plan's groups in place."""
        self._send_groups(dp, plan, dp.ofproto.OFPGC_MODIFY)

    # -- health: link probes -----------------------------------------------------------
    def _poll_health(self) -> None:
        """Every interval: judge the last round of probes, then send the next round."""
        links = self.health.links()
        index = {edge: i for i, edge in enumerate(links)}
        ports = {}
        for lk in self.spec.links:
            if lk.kind == "fabric":
                ports[(lk.a, lk.b)] = ((self.dpids[lk.a], lk.a_port), (self.dpids[lk.b], lk.b_port))
        round_no = 0
        while True:
            time.sleep(self.health_interval)
            with self.lock:
                # a round is judged one interval after the next was sent: late probes count
                sent = self._probe_sent.pop(round_no - 1, {})
                got = self._probe_got.pop(round_no - 1, {})
                round_no += 1
                self._probe_sent[round_no], self._probe_got[round_no] = {}, {}
                dead = {self.edges[p] for p in self.down_ports if p in self.edges}
                dps = dict(self.datapaths)
            counts = {key: (n, min(n, got.get(key, 0))) for key, n in sent.items()}
            if counts:
                self._judge(counts)
            ready = {d for d in dps if d not in self.pending_barrier}
            for edge, ((low_dp, low_port), (high_dp, high_port)) in ports.items():
                if edge in dead or edge in self.health.drained:
                    continue
                if not {low_dp, high_dp} <= ready:
                    continue  # both ends connected with their plan (and probe catch) installed
                for up, (dpid, port) in ((True, (low_dp, low_port)),
                                         (False, (high_dp, high_port))):
                    dp = dps.get(dpid)
                    if dp is None:
                        continue
                    for i in range(self.probes):
                        self._packet_out(dp, port, encode_probe(
                            index[edge], up, round_no * PROBES_PER_ROUND + i))
                    key = (edge, "up" if up else "down")
                    with self.lock:
                        sent_now = self._probe_sent[round_no]
                        sent_now[key] = sent_now.get(key, 0) + self.probes

    @staticmethod
    def _packet_out(dp, port: int, frame: bytes) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPPacketOut(dp, buffer_id=ofp.OFP_NO_BUFFER,
                                        in_port=ofp.OFPP_CONTROLLER,
                                        actions=[parser.OFPActionOutput(port)], data=frame))

    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev) -> None:
        if self.health is None:
            return
        probe = decode_probe(ev.msg.data)
        if probe is None:
            return
        link, up, seq = probe
        with self.lock:
            got = self._probe_got.get(seq // PROBES_PER_ROUND)
            if got is None:
                return  # later than a whole interval: counted as lost in its round
            key = (self.health.links()[link], "up" if up else "down")
            got[key] = got.get(key, 0) + 1

    def _judge(self, counts) -> None:
        with self.lock:
            drains = self.health.sample(time.time(), counts)
        if self.health.last_loss:
            worst = max(self.health.last_loss.items(), key=lambda kv: kv[1])
            self.status.emit("health", worst_link=list(worst[0][0]), direction=worst[0][1],
                             loss=worst[1])
        for d in drains:
            self.status.emit("drain", link=list(d.edge), direction=d.direction, loss=d.loss,
                             sent=d.sent, received=d.received, sampled=d.t)
        if drains:
            self._push_all("drain " + ",".join("-".join(d.edge) for d in drains))

    def _install_probe_catch(self, dp) -> None:
        """Return link probes to the controller (they never reach the forwarding rules)."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, [
            parser.OFPActionOutput(ofp.OFPP_CONTROLLER, ofp.OFPCML_NO_BUFFER)])]
        dp.send_msg(parser.OFPFlowMod(dp, priority=PRIORITY_PROBE,
                                      match=parser.OFPMatch(eth_type=PROBE_ETHERTYPE),
                                      instructions=inst))
