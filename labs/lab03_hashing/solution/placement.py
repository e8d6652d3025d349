"""Lab 3 solution (keep it away from students): a placement policy for the stride
pattern, as an os-ken app.

Every node i sends one elephant flow to node i + 8 (mod 16) on a 4-leaf x 4-spine
leaf-spine. The lab's ECMP hashes each flow onto an uplink; hashing collides flows on
some uplinks while others idle. This app pins every flow to an uplink you choose,
above the hash (a rule of higher priority on the source leaf). Loaded by the lab's
scenario with ``controller: {apps: [labs.lab03_hashing.solution.placement:StridePlacement]}``
(run from the repository's top folder, so that ``labs`` is importable).

The solution: the host in slot j of every leaf sends up spine j. A leaf's four flows
take four different uplinks, and spine j carries exactly one flow from each leaf; with
the stride pattern those go to four different leaves, so every spine downlink carries
one flow too: no collision anywhere, as on one big switch.
"""

from __future__ import annotations

from os_ken.base import app_manager
from os_ken.controller import ofp_event
from os_ken.controller.handler import CONFIG_DISPATCHER, set_ev_cls
from os_ken.ofproto import ofproto_v1_3

from controllers import config
from topologies.spec import FabricSpec

PRIORITY = 400  # above the base routes and every overlay
COOKIE = 0x9300_0000_0000_0000


def choose_spine(slot: int, src_leaf: int, dst_leaf: int, spines: list[str]) -> str:
    """The spine for one flow. ``slot``: the source host's position on its leaf (0..3);
    ``src_leaf``/``dst_leaf``: leaf indices (0..3); ``spines``: the plane's spines, in
    order.
    """
    return spines[slot % len(spines)]


def plan(spec: FabricSpec) -> dict[int, list[tuple[str, str, int]]]:
    """The rules to install, per switch dpid: (source IP, destination IP, uplink port)."""
    hosts = sorted(spec.hosts, key=lambda h: h.node)
    stride = len(hosts) // 2
    leaves = sorted({h.interface(0, 0).switch for h in hosts})
    spines = sorted({p.peer for leaf in leaves for p in spec.switch_ports()
                     if p.switch == leaf and p.role.endswith("_uplink")})
    rules: dict[int, list[tuple[str, str, int]]] = {}
    for i, host in enumerate(hosts):
        src, dst = host.interface(0, 0), hosts[(i + stride) % len(hosts)].interface(0, 0)
        if src.switch == dst.switch:
            continue  # no uplink on the way
        slot = [h.node for h in hosts if h.interface(0, 0).switch == src.switch].index(host.node)
        spine = choose_spine(slot, leaves.index(src.switch), leaves.index(dst.switch), spines)
        port = spec.port_to(src.switch, spine)
        rules.setdefault(spec.switch(src.switch).dpid, []).append((src.ip, dst.ip, port))
    return rules


class StridePlacement(app_manager.OSKenApp):
    OFP_VERSIONS = [ofproto_v1_3.OFP_VERSION]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rules = plan(FabricSpec.from_json(config.active().spec))

    @set_ev_cls(ofp_event.EventOFPSwitchFeatures, CONFIG_DISPATCHER)
    def on_features(self, ev) -> None:
        dp, dpid = ev.msg.datapath, ev.msg.datapath_id  # os-ken sets dp.id later, maybe
        ofp, parser = dp.ofproto, dp.ofproto_parser
        for src_ip, dst_ip, port in self.rules.get(dpid, ()):
            match = parser.OFPMatch(eth_type=0x0800, ipv4_src=src_ip, ipv4_dst=dst_ip)
            actions = [parser.OFPActionOutput(port)]
            dp.send_msg(parser.OFPFlowMod(
                dp, cookie=COOKIE, priority=PRIORITY, match=match,
                instructions=[parser.OFPInstructionActions(ofp.OFPIT_APPLY_ACTIONS, actions)]))
            self.logger.info("placed %s -> %s on port %d of dpid %d", src_ip, dst_ip, port,
                             dpid)
