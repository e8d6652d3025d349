"""os-ken app beside the routing app: telemetry, adaptive routing and ECN marking.

It never touches the proactive base (:mod:`controllers.fabric_app` owns it); everything
it installs is an overlay at higher priority with its own cookie or group ids, so if this
process dies the switches keep forwarding on the base rules (and the overlay rules it
left keep working or time out).

- Telemetry: every ``telemetry_ms`` one netlink dump of all root qdiscs (queue depth,
  drops) and an OpenFlow port-stats request to every switch; each reply is joined with
  the queue snapshot into ``telemetry.jsonl`` (:mod:`controllers.telemetry`).
- The routing mode (:mod:`controllers.routing`; the built-in ones in
  :mod:`controllers.modes`): it installs its own rules when a switch connects, is told
  of new flows (the learn rules' packet-ins), of port samples and of flow rates, and
  pins flows with :meth:`CongestionControl.pin_flow`.
- ECN marking by the controller (:mod:`controllers.ecn`) when ``ecn_backend`` is
  ``controller``.

os-ken's native hub runs :func:`hub.spawn` as an OS thread; the polling loop only reads
netlink (a short dump) and sends requests, replies are handled on the app's event thread.
"""

from __future__ import annotations

import os
import random
import threading
import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import (
    CONFIG_DISPATCHER,
    DEAD_DISPATCHER,
    MAIN_DISPATCHER,
    set_ev_cls,
)
from os_ken.lib import hub
from os_ken.lib.packet import ipv4, packet, tcp, udp
from os_ken.ofproto import ofproto_v1_3

from controllers import adaptive, config, ecmp, ecn, routing
from controllers.config import CLASSES
from controllers.fabric_app import StatusLog
from controllers.modes import flow_match
from controllers.paths import plan_switch
from controllers.telemetry import (
    PortCounters,
    PrometheusExporter,
    TelemetryWriter,
    make_sample,
    poll_interval_ms,
    port_table,
)
from testbed.host.netlink import QueueReader
from topologies import plugins
from topologies.spec import FabricSpec

LEARN_BYTES = 128
CPU_EVENT_S = 5.0


class CongestionControl(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = config.active()
        self.spec = FabricSpec.from_json(self.cfg.spec)
        self.status = StatusLog(self.cfg.status)
        self.telemetry_path = self.cfg.telemetry
        self.writer = TelemetryWriter(self.telemetry_path) if self.telemetry_path else None
        self.ports = port_table(self.spec)
        self.plans = {sw.dpid: plan_switch(self.spec, sw.dpid) for sw in self.spec.switches}
        #: per switch: destination -> its ECMP set (routes over several ports)
        self.sets = {dpid: plan.multipath() for dpid, plan in self.plans.items()}
        #: per switch: the members of any such set (each with marking groups)
        self.multipath_ports = {dpid: set(plan.multipath_ports())
                                for dpid, plan in self.plans.items()}
        self.datapaths: dict[int, object] = {}
        self.counters: dict[tuple[int, int], PortCounters] = {}
        self.util: dict[tuple[int, int], float] = {}
        self.queues: dict = {}
        self.asked: dict[tuple[int, int], tuple[float, dict]] = {}
        self.asked_lock = threading.Lock()
        self.sample_t = time.time()
        self.tick_no = 0
        self.rng = random.Random(self.cfg.seed)
        self.marks = {(d, p, c): ecn.MarkState() for (d, p) in self.ports for c in CLASSES}
        self.rates: dict[int, adaptive.FlowRates] = {}
        self.paths = adaptive.PathTable(self.spec, self.plans)
        self.flow_parts: dict[int, list] = {}
        self.flow_asked: dict[int, float] = {}
        self.learned_at: dict[tuple[int, adaptive.FlowKey], float] = {}
        #: the sampling interval: telemetry_ms, longer when the ports exceed the budget
        self.interval_ms = poll_interval_ms(self.cfg.telemetry_ms, len(self.ports),
                                            self.cfg.telemetry_budget)
        #: the routing mode (a plug-in one loaded here, from the scenario's folders too)
        for folder in self.cfg.plugin_path:
            plugins.add_folder(folder)
        plugins.allow()
        self.mode = routing.MODES.resolve(self.cfg.mode, "controller.mode")(self)
        self.exporter = None
        if self.cfg.prometheus_port:
            try:
                self.exporter = PrometheusExporter(self.cfg.prometheus_port)
            except OSError as exc:  # a fixed port another program holds: said, not fatal
                self.status.emit("prometheus_failed", port=self.cfg.prometheus_port,
                                 error=exc.strerror or str(exc))
            else:
                self.status.emit("prometheus", port=self.exporter.port,
                                 url=f"http://127.0.0.1:{self.exporter.port}/metrics")
        self.active = bool(self.telemetry_path or self.exporter or self.mode.PLACES
                           or self.cfg.controller_marks)
        if self.active:
            self.reader = QueueReader(sorted(p.ifname for p in self.ports.values()))
            hub.spawn(self.poll_loop)
        self.status.emit("congestion_started", mode=self.mode.NAME, ecn=self.cfg.ecn_backend,
                         telemetry_ms=self.cfg.telemetry_ms,
                         interval_ms=round(self.interval_ms, 1), ports=len(self.ports))

    # -- switches -------------------------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev) -> None:
        dp = ev.msg.datapath
        # os-ken's own handler sets the id in its own event thread, which may run after
        # this app's: taken from the message, a switch is never unknown for that race
        dp.id = ev.msg.datapath_id
        plan = self.plans.get(dp.id)
        if plan is None:
            return
        ofp, parser = dp.ofproto, dp.ofproto_parser
        # marks left by a previous controller process: no port is marking now; and, when
        # this one does not place flows, the flows it pinned and its learn rules (both
        # above the routes, they would outlive a routing change: recompute rewrites the
        # routes below them)
        # (gff: its pins too, its reservations died with the old process; the flows come
        # back to it through the learn rules, which in gff take any TCP packet)
        cookies = [ecn.COOKIE_MARK] + ([] if self.mode.KEEPS_PINS else [adaptive.COOKIE_FLOW])
        for cookie in cookies:
            dp.send_msg(parser.OFPFlowMod(
                dp, cookie=cookie, cookie_mask=adaptive.COOKIE_MASK,
                command=ofp.OFPFC_DELETE, table_id=ofp.OFPTT_ALL, out_port=ofp.OFPP_ANY,
                out_group=ofp.OFPG_ANY, match=parser.OFPMatch()))
        sets = self.sets[dp.id]
        if not sets:
            return  # no choice to make here (a spine, a core switch)
        learn = self.mode.places_at(dp.id)
        if learn:
            for ip, ports in sets.items():
                for fields in adaptive.learn_matches(ip, tcp=self.cfg.adaptive.place_tcp,
                                                     every_tcp=self.mode.EVERY_TCP):
                    self.add_flow(dp, adaptive.PRIORITY_LEARN, parser.OFPMatch(**fields),
                                  [ecmp.spread(parser, ports), self.to_controller(dp)],
                                  cookie=adaptive.COOKIE_LEARN)
        if self.cfg.controller_marks:
            for port in plan.multipath_ports():
                for cls in CLASSES:
                    # ADD, then MODIFY: after a controller restart the group exists (the
                    # ADD fails harmlessly) and may still carry the old process's marks
                    for command in (ofp.OFPGC_ADD, ofp.OFPGC_MODIFY):
                        dp.send_msg(self.mark_group(dp, command, cls, port))
                    # the uplink the ECMP hash chose, through the class's marking group
                    self.add_flow(dp, ecn.PRIORITY_ECT,
                                  parser.OFPMatch(**ecn.chosen_port_match(cls, port)),
                                  [parser.OFPActionGroup(ecn.mark_group(cls, port))],
                                  table=ecmp.PORT_TABLE)
        self.mode.install(dp, plan)
        if self.cfg.controller_marks:
            for fields, ports in ecn.ect_rules(plan):
                actions = [ecmp.choose(parser, ports)]
                if learn and fields["ip_proto"] == 17:  # TCP is learnt from its SYN
                    actions.append(self.to_controller(dp))
                self.add_flow(dp, ecn.PRIORITY_ECT, parser.OFPMatch(**fields), actions,
                              goto=ecmp.PORT_TABLE)

    def mark_group(self, dp, command: int, cls: str, port: int):
        """The group through which ECN-capable ``cls`` packets leave ECMP member ``port``
        (an uplink): a fast-failover group whose first bucket (marking while the port
        marks) watches the port, and whose others send to the other members, unmarked,
        when it is dead."""
        ofp, parser = dp.ofproto, dp.ofproto_parser
        order = ecn.mark_order(self.plans[dp.id], port)
        buckets = []
        for out in order:
            actions = [parser.OFPActionOutput(out)]
            if out == port and self.marks[(dp.id, port, cls)].on:
                actions.insert(0, parser.OFPActionSetField(ip_ecn=3))
            buckets.append(parser.OFPBucket(watch_port=out, watch_group=ofp.OFPG_ANY,
                                            actions=actions))
        return parser.OFPGroupMod(dp, command, ofp.OFPGT_FF, ecn.mark_group(cls, port),
                                  buckets)

    @set_ev_cls(ofp_event.EventOFPStateChange, [MAIN_DISPATCHER, DEAD_DISPATCHER])
    def on_state(self, ev) -> None:
        dp = ev.datapath
        if ev.state == MAIN_DISPATCHER and dp.id in self.plans:
            self.datapaths[dp.id] = dp
        elif ev.state == DEAD_DISPATCHER and dp.id is not None:
            self.datapaths.pop(dp.id, None)

    @staticmethod
    def to_controller(dp):
        return dp.ofproto_parser.OFPActionOutput(dp.ofproto.OFPP_CONTROLLER, LEARN_BYTES)

    @staticmethod
    def add_flow(dp, priority: int, match, actions, *, cookie: int = 0, idle: int = 0,
                 command: int | None = None, table: int = 0, goto: int | None = None) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        command = ofp.OFPFC_ADD if command is None else command
        inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
        if goto is not None:
            inst.append(parser.OFPInstructionGotoTable(goto))
        # a delete filters on out_port/out_group too: ANY, or it matches nothing
        deleting = command in (ofp.OFPFC_DELETE, ofp.OFPFC_DELETE_STRICT)
        dp.send_msg(parser.OFPFlowMod(
            dp, cookie=cookie, command=command, idle_timeout=idle, priority=priority,
            table_id=table,
            match=match, instructions=inst,
            out_port=ofp.OFPP_ANY if deleting else 0, out_group=ofp.OFPG_ANY if deleting else 0))

    # -- telemetry ------------------------------------------------------------------
    def poll_loop(self) -> None:
        interval = self.interval_ms / 1000
        every = max(1, round(max(self.cfg.adaptive.interval_ms, 1000 * adaptive.FLOW_POLL_S)
                             / self.interval_ms))
        next_t, next_cpu = time.monotonic(), time.monotonic() + CPU_EVENT_S
        while True:
            try:
                self.tick(every)
            except Exception:  # keep sampling: one bad tick must not end the telemetry
                self.logger.exception("telemetry tick failed")
            now = time.monotonic()
            if now >= next_cpu:
                t = os.times()
                self.status.emit("cpu", user_s=round(t.user, 3), system_s=round(t.system, 3))
                next_cpu = now + CPU_EVENT_S
            next_t += interval
            hub.sleep(max(0.0, next_t - time.monotonic()))
            if time.monotonic() - next_t > interval:  # fell behind: do not burst
                next_t = time.monotonic()

    def tick(self, every: int) -> None:
        """Snapshot every queue, then ask every switch for its port (and flow) counters."""
        try:
            self.queues = self.reader.read()
        except OSError as exc:  # a port vanished mid-dump (teardown): next tick
            self.logger.warning("qdisc dump failed: %s", exc)
        self.sample_t = time.time()
        self.tick_no += 1
        with self.asked_lock:  # the event thread pops answered requests
            for k in [k for k, (t, _) in self.asked.items() if t < self.sample_t - 5]:
                del self.asked[k]  # never answered (a switch went away)
        for dp in list(self.datapaths.values()):
            parser, ofp = dp.ofproto_parser, dp.ofproto
            request = parser.OFPPortStatsRequest(dp, 0, ofp.OFPP_ANY)
            dp.set_xid(request)
            # a late reply still belongs to the tick (time, queue snapshot) that asked
            with self.asked_lock:
                self.asked[(dp.id, request.xid)] = (self.sample_t, self.queues)
            dp.send_msg(request)
            if (self.mode.places_at(dp.id) and self.tick_no % every == 0
                    and self.sets[dp.id]):
                self.request_flow_stats(dp)

    def request_flow_stats(self, dp) -> None:
        """Ask a switch that places flows for its per-flow counters, unless a request is
        still unanswered."""
        if time.monotonic() - self.flow_asked.get(dp.id, -1e9) < 2.0:
            return
        self.flow_asked[dp.id] = time.monotonic()
        ofp, parser = dp.ofproto, dp.ofproto_parser
        dp.send_msg(parser.OFPFlowStatsRequest(
            dp, 0, 0, ofp.OFPP_ANY, ofp.OFPG_ANY, adaptive.COOKIE_FLOW,
            adaptive.COOKIE_MASK, parser.OFPMatch()))

    @set_ev_cls(ofp_event.EventOFPPortStatsReply, MAIN_DISPATCHER)
    def on_port_stats(self, ev) -> None:
        dp = ev.msg.datapath
        with self.asked_lock:
            asked = self.asked.pop((dp.id, ev.msg.xid), None)
            if asked is not None and ev.msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
                self.asked[(dp.id, ev.msg.xid)] = asked
        if asked is None:
            return
        t, queues = asked
        samples = []
        for stat in ev.msg.body:
            info = self.ports.get((dp.id, stat.port_no))
            if info is None:
                continue
            now = PortCounters(stat.tx_bytes, stat.rx_bytes, stat.tx_packets, stat.tx_dropped,
                               stat.duration_sec + stat.duration_nsec / 1e9)
            key = (dp.id, stat.port_no)
            sample = make_sample(t, info, self.counters.get(key), now, queues.get(info.ifname))
            self.counters[key] = now
            self.util[key] = sample.util
            samples.append(sample)
            if self.cfg.controller_marks:
                self.update_marking(dp, info, sample.backlog_bytes)
        self.mode.on_samples(dp, samples)
        if self.writer and samples:
            self.writer.write(samples[0].switch, t, samples)
        if self.exporter:
            self.exporter.update(samples)

    # -- ECN ------------------------------------------------------------------------
    def update_marking(self, dp, info, backlog: int) -> None:
        for cls in CLASSES:
            state = self.marks[(dp.id, info.port, cls)]
            if not state.update(backlog, getattr(self.cfg.ecn.classes, cls), self.rng.random):
                continue
            ofp, parser = dp.ofproto, dp.ofproto_parser
            if info.port in self.multipath_ports[dp.id]:  # a leaf uplink: its groups
                dp.send_msg(self.mark_group(dp, ofp.OFPGC_MODIFY, cls, info.port))
            # destinations routed to this port alone: marking rules of their own
            for fields in ecn.mark_rules(self.plans[dp.id], info.port, cls):
                match = parser.OFPMatch(**fields)
                if state.on:
                    self.add_flow(dp, ecn.PRIORITY_MARK, match,
                                  [parser.OFPActionSetField(ip_ecn=3),
                                   parser.OFPActionOutput(info.port)],
                                  cookie=ecn.COOKIE_MARK)
                else:
                    self.add_flow(dp, ecn.PRIORITY_MARK, match, [],
                                  command=ofp.OFPFC_DELETE_STRICT)
            self.status.emit("ecn_on" if state.on else "ecn_off", switch=info.switch,
                             port=info.port, ifname=info.ifname, role=info.role,
                             **{"class": cls}, backlog_bytes=backlog)

    # -- flows, for the routing mode ---------------------------------------------------
    @set_ev_cls(ofp_event.EventOFPPacketIn, MAIN_DISPATCHER)
    def on_packet_in(self, ev) -> None:
        msg = ev.msg
        dp = msg.datapath
        plan = self.plans.get(dp.id)
        if not self.mode.places_at(dp.id) or plan is None:
            return
        key = flow_key(msg.data)
        if key is None or key.dst not in self.sets[dp.id]:
            return
        now = time.monotonic()
        if now - self.learned_at.get((dp.id, key), -1e9) < 1.0:
            return  # rule on its way; these are packets that were already in flight
        self.learned_at[(dp.id, key)] = now
        self.mode.on_new_flow(dp, key, self.sets[dp.id][key.dst])

    def pin_flow(self, dp, key: adaptive.FlowKey, port: int, command: int) -> None:
        """The rules that send flow ``key`` out of ``port``: one for all its packets and,
        when the controller marks, one per ECT codepoint through the marking group."""
        parser = dp.ofproto_parser
        uplinks = self.sets[dp.id].get(key.dst, [port])
        self.add_flow(dp, adaptive.PRIORITY_FLOW, flow_match(parser, key),
                      [ecmp.prefer(parser, port, uplinks)], cookie=adaptive.COOKIE_FLOW,
                      idle=adaptive.FLOW_IDLE_S, command=command)
        cls = ecn.flow_class(key.proto, key.dport)
        if not self.cfg.controller_marks or cls is None:
            return
        for ect in ecn.ECT_CODEPOINTS:
            self.add_flow(dp, adaptive.PRIORITY_FLOW + 1, flow_match(parser, key, ip_ecn=ect),
                          [parser.OFPActionGroup(ecn.mark_group(cls, port))],
                          cookie=adaptive.COOKIE_FLOW, idle=adaptive.FLOW_IDLE_S,
                          command=command)

    @set_ev_cls(ofp_event.EventOFPFlowStatsReply, MAIN_DISPATCHER)
    def on_flow_stats(self, ev) -> None:
        msg, dp = ev.msg, ev.msg.datapath
        parts = self.flow_parts.setdefault(dp.id, [])
        parts.extend(msg.body)
        if msg.flags & dp.ofproto.OFPMPF_REPLY_MORE:
            return
        del self.flow_parts[dp.id]
        self.flow_asked.pop(dp.id, None)
        flows: dict[adaptive.FlowKey, list] = {}  # key -> [port, bytes, age]
        for stat in parts:
            key = key_of_match(stat.match)
            port = out_port(stat.instructions)
            if key is None or port is None:
                continue
            entry = flows.setdefault(key, [port, 0, 0.0])
            entry[1] += stat.byte_count  # a flow's ECT packets count on their own rules
            if stat.priority == adaptive.PRIORITY_FLOW:
                entry[0] = port
                entry[2] = stat.duration_sec + stat.duration_nsec / 1e9
        readings = [(key, port, nbytes, age) for key, (port, nbytes, age) in flows.items()]
        loads = self.rates.setdefault(dp.id, adaptive.FlowRates()).update(readings)
        stale = time.monotonic() - 30
        for k in [k for k, t in self.learned_at.items() if k[0] == dp.id and t < stale]:
            del self.learned_at[k]
        self.mode.on_flow_loads(dp, loads)


def flow_key(data: bytes) -> adaptive.FlowKey | None:
    """The IPv4 TCP/UDP 5-tuple of a (truncated) Ethernet frame, or None."""
    pkt = packet.Packet(data)
    ip = pkt.get_protocol(ipv4.ipv4)
    if ip is None:
        return None
    l4 = pkt.get_protocol(tcp.tcp) or pkt.get_protocol(udp.udp)
    if l4 is None:
        return None
    return adaptive.FlowKey(ip.proto, ip.src, ip.dst, l4.src_port, l4.dst_port)


def key_of_match(match) -> adaptive.FlowKey | None:
    fields = dict(match.items())
    proto = fields.get("ip_proto")
    l4 = {6: "tcp", 17: "udp"}.get(proto)
    if l4 is None or f"{l4}_src" not in fields:
        return None
    return adaptive.FlowKey(proto, fields["ipv4_src"], fields["ipv4_dst"],
                            fields[f"{l4}_src"], fields[f"{l4}_dst"])


def out_port(instructions) -> int | None:
    """The uplink a per-flow rule sends to: its output port, the preferred member of its
    bundle, or its marking group's."""
    for inst in instructions:
        for action in getattr(inst, "actions", []):
            if getattr(action, "slaves", None):
                return action.slaves[0]
            if hasattr(action, "port"):
                return action.port
            if hasattr(action, "group_id"):
                return ecn.port_of_group(action.group_id)
    return None
