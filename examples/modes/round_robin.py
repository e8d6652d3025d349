"""A routing mode of one's own: each leaf puts its new flows on its uplinks in turn.

Loaded from a scenario with ``controller: {mode: "examples.modes.round_robin:RoundRobin"}``
(the controller's process imports it). It places every new TCP connection and UDP flow
that a switch with several next hops sends to the controller (the learn rules' packet-in)
on the next uplink of that switch's ECMP set, one after the other, blind to load: the
simplest placement there is, to set beside ``ecmp`` (a hash) and ``adaptive`` (the least
loaded path). Its decisions are the controller's ``flow_placed`` events.
"""

from __future__ import annotations

from controllers.routing import RoutingMode


class RoundRobin(RoutingMode):
    NAME = "round-robin"
    DESCRIPTION = "each new flow on the next uplink in turn, load unseen"
    PLACES = True  # flows are learnt and pinned with rules of their own

    def __init__(self, app) -> None:
        super().__init__(app)
        self.turn: dict[tuple[int, tuple[int, ...]], int] = {}  # (switch, set) -> flows

    def places_at(self, dpid: int) -> bool:
        return True  # every switch with a choice (the learn rules go where there is one)

    def on_new_flow(self, dp, key, uplinks) -> None:
        n = self.turn.get((dp.id, tuple(uplinks)), 0)
        self.turn[(dp.id, tuple(uplinks))] = n + 1
        port = uplinks[n % len(uplinks)]
        self.app.pin_flow(dp, key, port, dp.ofproto.OFPFC_ADD)
        self.app.status.emit("flow_placed", flow=str(key), switch=self.app.plans[dp.id].name,
                             port=port, mode=self.NAME)
