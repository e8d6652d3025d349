"""The controller section of a scenario as pydantic models: what the scenario validates
(:mod:`testbed.experiments.fabric.schema` imports these) and what the controller reads
back from its ``controller.json`` (:mod:`controllers.config`), one model for both.
Every default here is the documented default of the scenario format.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, field_validator

from controllers.routing import MODES
from topologies import plugins
from topologies.params import Section, clip

#: traffic classes the ECN thresholds apply to
CLASSES = ("collective", "agents")


class EcnClass(Section):
    """RED-style thresholds of one traffic class (KB of egress queue)."""

    min_kb: float = Field(20, gt=0, description="queue (KB) from which packets are marked CE")
    max_kb: float = Field(60, gt=0, description="queue (KB) at which the marking probability "
                                                "reaches probability (above: every packet)")
    probability: float = Field(0.1, ge=0, le=1, description="marking probability at max_kb "
                                                            "(0..1; RED's max_p)")

    @property
    def min_bytes(self) -> int:
        return int(self.min_kb * 1000)

    @property
    def max_bytes(self) -> int:
        return int(self.max_kb * 1000)


class EcnClasses(Section):
    collective: EcnClass = Field(EcnClass(), description="thresholds of the RoCE collective "
                                                         "(training) traffic")
    agents: EcnClass = Field(EcnClass(), description="thresholds of the agent chains' TCP")

    def by_name(self) -> dict[str, EcnClass]:
        """``{"collective": ..., "agents": ...}``."""
        return {name: getattr(self, name) for name in CLASSES}


ECN_MODES = ("off", "controller", "switch", "phantom", "auto")


class Ecn(Section):
    """Who marks CE: ``switch`` (RED), ``phantom`` (nftables phantom queues),
    ``controller``, ``auto`` (RED where present, else the controller) or ``off``."""

    # YAML reads a bare `off` as false: accepted and kept as "off"
    mode: Literal[ECN_MODES] | Literal[False] = Field(  # type: ignore[valid-type]
        "off", description="who marks CE: switch (RED in the switch queues), phantom "
                           "(nftables phantom queues), controller, auto (RED where the "
                           "kernel has it, else the controller) or off")
    drain: float = Field(0.95, ge=0.5, le=1.0,
                         description="phantom queues drain at this fraction of the link rate")
    classes: EcnClasses = Field(EcnClasses(), description="marking thresholds per traffic "
                                                          "class")

    @field_validator("mode", mode="before")
    @classmethod
    def _off(cls, value: Any) -> Any:
        return "off" if value is False else value


class Adaptive(Section):
    interval_ms: float = Field(100, ge=10, le=60000,
                               description="ms between per-flow counter reads")
    imbalance: float = Field(0.2, ge=0.01, le=10,
                             description="utilisation gap (fraction of the link rate) between "
                                         "two uplinks above which an elephant is moved")
    elephant_mbps: float = Field(1.0, gt=0, description="Mb/s above which a flow is an "
                                                        "elephant (placed and moved)")
    place_tcp: bool = Field(True, description="place TCP connections too (learnt from SYN)")


class Health(Section):
    """The link-probe health monitor that drains lossy links."""

    enabled: bool = Field(False, description="probe every switch-to-switch link and drain "
                                             "the lossy ones")
    loss_threshold: float = Field(0.05, gt=0, lt=1, description="loss (fraction of probes) "
                                                                "above which a link is drained")
    interval_ms: float = Field(250, ge=50, le=60000, description="ms between probe rounds")
    samples: int = Field(2, ge=1, le=100, description="probe rounds a link direction's loss "
                                                      "is judged over")
    probes: int = Field(10, ge=1, le=100, description="probe frames per link direction and "
                                                      "round")
    min_packets: int = Field(20, gt=0, description="probes the window must hold before a "
                                                   "link is judged")


class Controller(Section):
    mode: str = Field(
        "ecmp", description="the routing mode: ecmp: static hash; adaptive: per-switch "
                            "placement and elephant moves; gff: Hedera's global first fit "
                            "for elephants; spray: per-packet spreading of RoCE; or "
                            "package.module:Class, a mode of one's own "
                            "(controllers.routing.RoutingMode)",
        json_schema_extra={"anyOf": [{"enum": list(MODES)},
                                     {"pattern": plugins.DOTTED.pattern}]})
    telemetry_ms: int = Field(100, ge=10, le=5000, description="ms between port-counter "
                                                               "samples of every switch")
    telemetry_budget: int = Field(
        2000, ge=0, le=1_000_000,
        description="port samples a second at most (0: no limit): on a fabric with more "
                    "switch ports than budget x telemetry_ms / 1000 the interval grows")
    prometheus_port: Literal["auto"] | Annotated[int, Field(ge=0, le=65535)] = Field(
        0, description="Prometheus metrics of every switch port on 127.0.0.1: 0 (off), "
                       "auto (a free port, printed at start and recorded, so that labs "
                       "running side by side never collide) or a fixed 1024..65535")
    adaptive: Adaptive = Field(Adaptive(), description="adaptive routing (mode adaptive): "
                                                       "when elephants move")
    ecn: Ecn = Field(Ecn(), description="ECN marking in the fabric")
    fast_failover: bool = Field(False, description="OpenFlow fast-failover groups: a switch "
                                                   "moves traffic off a dead port by itself")
    recompute: bool = Field(False, description="the controller recomputes and reinstalls "
                                               "paths when a port goes down or up")
    health: Health = Field(Health(), description="the link-probe health monitor")
    apps: list[Annotated[str, Field(pattern=r"^[A-Za-z_][\w.]*(:[A-Za-z_]\w*)?$")]] = Field(
        default_factory=list,
        description="extra os-ken apps beside the base ones: package.module[:AppClass]")
    remote: Annotated[str, Field(pattern=r"^(127\.0\.0\.1|localhost):\d{1,5}$")] | None = Field(
        None, description="an external controller on this host (127.0.0.1:PORT): the "
                          "switches connect there and the lab starts no controller")

    @field_validator("mode")
    @classmethod
    def _mode(cls, value: str) -> str:
        if value in MODES or plugins.DOTTED.fullmatch(value):
            return value  # one of one's own: checked by its source, loaded by the controller
        raise ValueError(f"unknown routing mode {clip(value, 40)!r} (known: "
                         f"{', '.join(MODES)}, or package.module:Class)")

    @field_validator("prometheus_port")
    @classmethod
    def _port(cls, value: int | str) -> int | str:
        if isinstance(value, int) and value and value < 1024:
            raise ValueError("must be 0 (off) or 1024..65535")
        return value
