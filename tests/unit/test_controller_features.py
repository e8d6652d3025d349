"""A switch's features reply reaches the lab's apps before os-ken's own handler has set
the datapath's id (each app has its own event thread): the apps take the id from the
message, so the switch is known and gets its paths."""

from __future__ import annotations

from types import SimpleNamespace

from controllers.fabric_app import FabricRouting
from controllers.failover_app import ResilientRouting
from topologies.leafspine import build_fabric


class Status:
    def __init__(self):
        self.events: list[tuple[str, dict]] = []

    def emit(self, event: str, **fields) -> None:
        self.events.append((event, fields))


def features(dpid: int):
    """A features event as it arrives before os-ken's handler ran: ``dp.id`` unset."""
    sent = []
    parser = SimpleNamespace(OFPPortDescStatsRequest=lambda dp, flags: "port-desc")
    dp = SimpleNamespace(id=None, ofproto_parser=parser, send_msg=sent.append)
    return SimpleNamespace(msg=SimpleNamespace(datapath=dp, datapath_id=dpid)), sent


def test_the_routing_app_knows_a_switch_whose_id_os_ken_has_not_set_yet():
    spec = build_fabric(prefix="tb0f0f", nodes=2, leaves_per_plane=1, spines_per_plane=1)
    sw = spec.switches[0]
    installed = []
    app = SimpleNamespace(spec=spec, status=Status(), plans={},
                          install=lambda dp, plan: installed.append(plan.name))
    ev, _ = features(sw.dpid)
    FabricRouting.on_features(app, ev)
    assert app.status.events == [("connected", {"dpid": sw.dpid, "name": sw.name})]
    assert installed == [sw.name] and ev.msg.datapath.id == sw.dpid


def test_the_failover_app_knows_a_switch_whose_id_os_ken_has_not_set_yet():
    spec = build_fabric(prefix="tb0f0f", nodes=2, leaves_per_plane=1, spines_per_plane=1)
    sw = spec.switches[-1]
    app = SimpleNamespace(names={s.dpid: s.name for s in spec.switches}, status=Status())
    ev, sent = features(sw.dpid)
    ResilientRouting.on_features(app, ev)
    assert app.status.events == [("connected", {"dpid": sw.dpid, "name": sw.name})]
    assert sent == ["port-desc"]


def test_a_barrier_answered_before_os_ken_moves_the_switch_to_main_still_counts():
    """os-ken moves a switch to MAIN only after its own port-description reply, in its
    own thread: the paths' barrier may be answered first, while the switch is in CONFIG.
    os-ken hands a message only to handlers registered for the switch's state (the
    ``dispatchers`` read here), so the routing app listens in both, and reports it."""
    from os_ken.controller import ofp_event
    from os_ken.controller.handler import CONFIG_DISPATCHER, MAIN_DISPATCHER

    for handler, event in ((FabricRouting.on_barrier, ofp_event.EventOFPBarrierReply),
                           (FabricRouting.on_error, ofp_event.EventOFPErrorMsg)):
        assert {CONFIG_DISPATCHER, MAIN_DISPATCHER} <= set(handler.callers[event].dispatchers)
    spec = build_fabric(prefix="tb0f0f", nodes=2, leaves_per_plane=1, spines_per_plane=1)
    sw = spec.switches[0]
    app = SimpleNamespace(status=Status(), pending_barrier={sw.dpid: 7},
                          plans={sw.dpid: SimpleNamespace(name=sw.name, routes=[1, 2],
                                                          groups={})})
    reply = SimpleNamespace(msg=SimpleNamespace(datapath=SimpleNamespace(id=sw.dpid), xid=7))
    FabricRouting.on_barrier(app, reply)
    assert app.status.events == [("installed", {"dpid": sw.dpid, "name": sw.name, "flows": 5,
                                                "ecmp_sets": 0})]
    assert app.pending_barrier == {}
