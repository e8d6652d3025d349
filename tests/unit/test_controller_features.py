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
