"""Routing modes: how the congestion app chooses among a switch's next hops, beyond the
base routes' static hash (:mod:`controllers.fabric_app`).

A mode is a :class:`RoutingMode`, known by its ``NAME`` in :data:`MODES`; the scenario
names it in ``controller.mode`` (``ecmp``, ``adaptive``, ``gff``, ``spray``), or names a
mode of its own as ``package.module:Class`` (a subclass of :class:`RoutingMode`), which
the controller's process loads. The congestion app calls the mode's hooks at the points
where a mode decides something, and offers it the means to act (:class:`Means`):

- :meth:`RoutingMode.install`, when a switch connects: the mode's own rules;
- :meth:`RoutingMode.on_new_flow`, when a switch the mode places at (:meth:`places_at`)
  sends the first packet of a flow to a destination with several next hops (the learn
  rules' packet-in);
- :meth:`RoutingMode.on_samples`, after a switch's port counters came in;
- :meth:`RoutingMode.on_flow_loads`, after a placing switch's per-flow counters came
  in, as flow rates.

This module imports no os-ken (the testbed process reads :data:`MODES` to validate a
scenario); the built-in modes live in :mod:`controllers.modes`, imported when the
controller asks for one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from topologies import plugins

if TYPE_CHECKING:
    from controllers.adaptive import FlowKey, FlowLoad
    from controllers.paths import SwitchPlan
    from controllers.telemetry import Sample


class Means(Protocol):
    """What the congestion app offers a mode (its attributes and methods of the same
    names; see :class:`controllers.congestion_app.CongestionControl`)."""

    cfg: Any  # controllers.config.ControllerConfig
    spec: Any  # topologies.spec.FabricSpec
    plans: dict[int, SwitchPlan]
    #: per switch: destination -> its ECMP set (the ports of routes over several)
    sets: dict[int, dict[str, list[int]]]
    #: the connected switches by datapath id
    datapaths: dict[int, Any]
    #: the last utilisation (0..1) of every (dpid, port)
    util: dict[tuple[int, int], float]
    #: the telemetry tick, and its interval
    tick_no: int
    interval_ms: float
    #: the switch-level paths to every destination, and their load
    paths: Any  # controllers.adaptive.PathTable
    #: the controller's event log (``status.emit(event, **fields)``)
    status: Any  # controllers.fabric_app.StatusLog

    def add_flow(self, dp, priority: int, match, actions, **kw) -> None: ...
    def pin_flow(self, dp, key: FlowKey, port: int, command: int) -> None: ...
    def request_flow_stats(self, dp) -> None: ...


class RoutingMode:
    """A way of choosing among next hops; subclass it and override the hooks that
    matter (the base is ECMP: the hash alone, nothing placed)."""

    NAME = ""
    #: a line for ``testbed schema`` and the report
    DESCRIPTION = ""
    #: places flows with rules of its own (the telemetry loop then runs for it)
    PLACES = False
    #: its learn rules take every TCP packet (else a TCP flow's SYN, and UDP)
    EVERY_TCP = False
    #: per-flow rules an earlier controller process left are kept when a switch
    #: reconnects (else they are deleted and the flows learnt again)
    KEEPS_PINS = False

    def __init__(self, app: Means) -> None:
        self.app = app

    def places_at(self, dpid: int) -> bool:
        """Whether switch ``dpid`` sends this mode its new flows and flow counters."""
        return False

    def install(self, dp, plan: SwitchPlan) -> None:
        """Rules of the mode's own on a switch that just connected."""

    def on_new_flow(self, dp, key: FlowKey, uplinks: list[int]) -> None:
        """The first packet of flow ``key`` at a placing switch, whose route to the
        flow's destination goes over any of ``uplinks``."""

    def on_samples(self, dp, samples: list[Sample]) -> None:
        """A switch's port samples of this tick (utilisation in ``app.util`` already)."""

    def on_flow_loads(self, dp, loads: list[FlowLoad]) -> None:
        """A placing switch's flows with their rates, from its per-flow counters."""


#: the routing modes by name: the built-in ones, and those a scenario names
MODES = plugins.Registry("routing mode", RoutingMode)
for _name, _cls in (("ecmp", "Ecmp"), ("adaptive", "Adaptive"), ("gff", "Gff"),
                    ("spray", "Spray")):
    MODES.add(_name, f"controllers.modes:{_cls}")
