"""An os-ken app beside the lab's own: it pins the traffic of one host pair to one spine.

The base apps spread flows over the uplinks by a hash; this one adds, at a higher
priority, a rule on the source host's leaf that sends everything from node 0 to node 3
(plane 0) up the uplink to the leaf's *last* spine. Loaded from a scenario with
``controller: {apps: [examples.apps.pin_flow:PinFlow]}``; it reads the lab's controller
configuration (the topology spec) like the base apps do.
"""

from __future__ import annotations

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

from controllers import config
from topologies.spec import FabricSpec

PRIORITY = 400  # above the base routes and every overlay
COOKIE = 0x9100_0000_0000_0001
SRC, DST = 0, 3  # node indices


class PinFlow(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.spec = FabricSpec.from_json(config.active().spec)
        src = self.spec.hosts[SRC].interface(0, 0)
        self.src_ip, self.dst_ip = src.ip, self.spec.hosts[DST].interface(0, 0).ip
        self.leaf = self.spec.switch(src.switch)
        self.uplink = self.spec.uplink_ports(self.leaf.name)[-1]  # to the last spine

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev) -> None:
        dp = ev.msg.datapath
        # the id from the message: os-ken sets dp.id in its own handler of this event,
        # which may run after this one
        if ev.msg.datapath_id != self.leaf.dpid:
            return
        ofp, parser = dp.ofproto, dp.ofproto_parser
        match = parser.OFPMatch(eth_type=0x0800, ipv4_src=self.src_ip, ipv4_dst=self.dst_ip)
        actions = [parser.OFPActionOutput(self.uplink)]
        dp.send_msg(parser.OFPFlowMod(
            dp, cookie=COOKIE, priority=PRIORITY, match=match,
            instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]))
        self.logger.info("pinned %s -> %s to port %d of %s", self.src_ip, self.dst_ip,
                         self.uplink, self.leaf.name)
