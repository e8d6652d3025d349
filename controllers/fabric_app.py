"""os-ken app: proactive forwarding for every host pair on every plane, ECMP across spines.

On each switch's handshake it installs that switch's whole plan from the topology spec
(see :mod:`controllers.paths`) and confirms it with a barrier. Nothing is reactive: the
switches run with fail_mode=secure, so forwarding keeps working when this process dies.
Remote destinations spread over the uplinks by a 5-tuple hash (:mod:`controllers.ecmp`).
Everything is sent as adds, which overwrite in place, so a restarted controller
resynchronizes a switch without flushing working flows.

Configuration: the controller's configuration file (:func:`controllers.config.active`,
loaded by ``python -m controllers``): ``spec`` (the topology spec, JSON) and ``status``
(JSON lines of events for the runner).
"""

from __future__ import annotations

import json
import os
import threading
import time

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

from controllers import config, ecmp
from controllers.paths import PRIORITY_HOST, SwitchPlan, plan_switch
from topologies.spec import FabricSpec

ETH_IPV4 = 0x0800
ETH_ARP = 0x0806


class StatusLog:
    """Append-only JSON lines the runner waits on (one writer, many threads)."""

    def __init__(self, path: str | None):
        self._path = path
        self._lock = threading.Lock()

    def emit(self, event: str, **fields: object) -> None:
        if not self._path:
            return
        line = json.dumps({"t": time.time(), "event": event, **fields})
        with self._lock, open(self._path, "a") as f:
            f.write(line + "\n")


class FabricRouting(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.cfg = config.active()
        self.spec = FabricSpec.from_json(self.cfg.spec)
        self.status = StatusLog(self.cfg.status)
        self.plans: dict[int, SwitchPlan] = {}
        self.pending_barrier: dict[int, int] = {}
        self.status.emit("started", pid=os.getpid(), switches=len(self.spec.switches))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev) -> None:
        dp = ev.msg.datapath
        # os-ken's own handler sets the id in its own event thread, which may run after
        # this app's: taken from the message, a switch is never unknown for that race
        dp.id = ev.msg.datapath_id
        try:
            plan = plan_switch(self.spec, dp.id)
        except KeyError:
            self.status.emit("unknown_switch", dpid=dp.id)
            return
        self.plans[dp.id] = plan
        self.status.emit("connected", dpid=dp.id, name=plan.name)
        self.install(dp, plan)

    def install(self, dp, plan: SwitchPlan) -> None:
        ofp, parser = dp.ofproto, dp.ofproto_parser
        # table miss: drop (explicit, so nothing is sent to the controller)
        dp.send_msg(parser.OFPFlowMod(dp, priority=0, match=parser.OFPMatch(), instructions=[]))
        for route in plan.routes:
            actions = [self.route_action(parser, plan, route)]
            inst = [parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]
            for match in (
                parser.OFPMatch(eth_type=ETH_IPV4, ipv4_dst=route.ip),
                parser.OFPMatch(eth_type=ETH_ARP, arp_tpa=route.ip),
            ):
                dp.send_msg(
                    parser.OFPFlowMod(dp, priority=PRIORITY_HOST, match=match, instructions=inst)
                )
        request = parser.OFPBarrierRequest(dp)
        dp.set_xid(request)
        self.pending_barrier[dp.id] = request.xid
        dp.send_msg(request)

    @staticmethod
    def route_action(parser, plan: SwitchPlan, route):
        """Out of the route's port, or hashed over the live members of its ECMP set."""
        if route.group is not None:
            return ecmp.spread(parser, plan.groups[route.group])
        return parser.OFPActionOutput(route.port)

    # CONFIG too: os-ken moves a switch to MAIN only once its own port-description reply
    # is handled, in its own thread; a barrier answered before that (seen under the lab
    # VM's emulation: the first switch to connect never reported "installed") arrives in
    # CONFIG and a MAIN-only handler never sees it
    @set_ev_cls(ofp_event.EventOFPBarrierReply, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_barrier(self, ev) -> None:
        dp = ev.msg.datapath
        if self.pending_barrier.get(dp.id) != ev.msg.xid:
            return
        del self.pending_barrier[dp.id]
        plan = self.plans[dp.id]
        self.status.emit(
            "installed", dpid=dp.id, name=plan.name,
            flows=2 * len(plan.routes) + 1, ecmp_sets=len(plan.groups),
        )

    @set_ev_cls(ofp_event.EventOFPErrorMsg, [CONFIG_DISPATCHER, MAIN_DISPATCHER])
    def on_error(self, ev) -> None:
        msg, dp = ev.msg, ev.msg.datapath
        ofp = dp.ofproto
        if msg.type == ofp.OFPET_GROUP_MOD_FAILED and msg.code == ofp.OFPGMFC_GROUP_EXISTS:
            # a restarted controller (or the overlay's add-then-modify): bring the existing
            # groups up to date
            plan = self.plans.get(dp.id)
            if plan is not None:
                self.resync_groups(dp, plan)
            return
        self.status.emit("error", dpid=dp.id, type=msg.type, code=msg.code)

    def resync_groups(self, dp, plan) -> None:
        """Modify the switch's groups in place to match ``plan`` (never delete). The base
        plan has none (ECMP is a flow action); subclasses that add groups override this."""
