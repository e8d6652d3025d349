"""The fabric kind's scenario sections as pydantic models (shape, types, ranges, defaults).

Cross-field rules that need the built topology (node indices, the MTU, fault targets)
are checked by :mod:`testbed.experiments.fabric.checks` after these models have parsed a
section. Every default here is the documented default of the scenario format.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Discriminator, Field, Tag, WithJsonSchema

# the controller section, one model shared with the controller process
from controllers.schema import (  # noqa: F401
    ECN_MODES,
    Adaptive,
    Controller,
    Ecn,
    EcnClass,
    EcnClasses,
    Health,
)
from testbed.acceptance.schema import Acceptance
from testbed.fabric.qos import Qos
from testbed.fabric.switchd import SwitchSettings
from testbed.faults import kinds
from testbed.operations.schema import Replacement
from topologies import plugins
from topologies.params import Section

Name = Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,40}$")]


SERVICES = ("retriever", "tool", "model", "agent")


class Agents(Section):
    enabled: bool = Field(True, description="run agent chains (retriever, tool, model, "
                                            "agent hops over TCP)")
    driver: int = Field(0, ge=0, description="node index that runs the chains")
    services: dict[Literal["retriever", "tool", "model", "agent"], int] = Field(
        default_factory=dict, description="node index of each service")
    concurrency: int = Field(8, ge=1, le=256, description="chains in flight at once")
    timeout_ms: float = Field(2000, gt=0, description="ms after which a chain counts as "
                                                      "failed")
    service_us: int = Field(0, ge=0, description="µs each service works on a request before "
                                                 "it replies")
    ecn: bool = Field(False, description="net.ipv4.tcp_ecn=1 in every host namespace")
    congestion_control: Literal["default", "reno", "cubic", "dctcp"] = Field(
        "default", description="TCP congestion control of every socket in the host "
                               "namespaces, set on each host route (congctl); default: the "
                               "kernel's. dctcp needs tcp_dctcp and negotiates ECN itself")
    multipath: bool = Field(False, description="host multipath: a hop that gets no reply on "
                                               "one plane is retried on another")
    attempt_ms: float = Field(500, gt=0, description="with multipath: ms a hop waits on one "
                                                     "plane before it tries the next")


class Dcqcn(Section):
    enabled: bool = Field(False, description="each channel's rate follows a DCQCN reaction "
                                             "point driven by the CNPs it receives")
    g: float = Field(1 / 16, gt=0, le=1, description="gain of the congestion estimate alpha")
    rai_mbps: float = Field(0.5, gt=0, description="additive increase step, Mb/s")
    rhai_mbps: float = Field(2.0, gt=0, description="hyper increase step, Mb/s")
    timer_us: float = Field(2000, ge=10, le=10**6, description="µs of the rate-increase "
                                                               "timer")
    alpha_timer_us: float = Field(2000, ge=10, le=10**6, description="µs between alpha "
                                                                     "decays without a CNP")
    byte_counter_kb: float = Field(64, gt=0, description="KB sent that count as one "
                                                         "rate-increase event")
    f: int = Field(5, ge=0, le=100, description="increase events of fast recovery before "
                                                "additive increase")
    min_rate_mbps: float = Field(0.5, gt=0, description="the rate never falls below this, "
                                                        "Mb/s")


class Training(Section):
    enabled: bool = Field(False, description="run a collective of RoCEv2 bursts among ranks")
    ranks: list[int] = Field(default_factory=list, description="node indices, in ring order")
    bytes: int = Field(2_000_000, ge=1000, le=10**9, description="bytes each rank sends per "
                                                                 "iteration")
    compute_ms: float = Field(50, ge=0, description="ms of compute (no traffic) before each "
                                                    "iteration's communication")
    rate_mbps: float = Field(80, gt=0, description="pacing rate of each channel, Mb/s (the "
                                                   "NIC's line rate in the model)")
    payload: int = Field(4096, ge=64, le=8192, description="RoCE payload bytes per packet")
    step_timeout_ms: float = Field(500, gt=0, description="ms a step waits for its data; "
                                                          "what is missing then is lost")
    pattern: Literal["ring", "stride", "random"] = Field(
        "ring", description="who sends to whom: ring all-reduce, a fixed stride, or a "
                            "random permutation")
    stride: int = Field(0, ge=0, description="0: half the ranks")
    ecn: bool = Field(False, description="senders mark their packets ECN-capable (ECT(0)); "
                                         "receivers answer CE with CNPs")
    cnp_interval_us: float = Field(50, ge=0, description="µs between two CNPs of one flow at "
                                                         "most")
    spray: bool = Field(False, description="rotate the UDP source port per packet, so ECMP "
                                           "spreads every packet")
    qps: int = Field(1, ge=1, le=64, description="queue pairs per channel: each message is "
                     "striped over them packet by packet, each its own UDP source port")
    dcqcn: Dcqcn = Field(Dcqcn(), description="DCQCN rate control of the senders")
    multipath: bool = Field(False, description="host multipath: chunks are re-split over the "
                                               "channels whose NIC has carrier")


FaultAction = Annotated[str, WithJsonSchema({
    "anyOf": [{"enum": list(kinds.KINDS)},
              {"type": "string", "pattern": kinds.DOTTED.pattern}],
    "description": "a fault kind (testbed.faults.kinds), or package.module:Class"})]


class FaultEntry(Section):
    """One fault of a variant's schedule; its target is checked against the topology,
    its parameters against its kind."""

    at_s: float = Field(ge=0, description="seconds after traffic starts (within the run)")
    action: FaultAction
    target: str | int | None = Field(None, description="what the kind acts on, named as in "
                                                       "the spec without the run prefix: a "
                                                       "link p0l0-p0s1, a switch p0s1, a "
                                                       "plane p1 (or 1), a NIC n2p0r0")
    loss: float | None = Field(None, ge=0.001, le=1.0, description="degrade")
    period_s: float | None = Field(None, ge=0.05, le=60, description="link_flap")
    count: int | None = Field(None, ge=1, le=100, description="link_flap")
    delay_ms: float | None = Field(None, ge=0, le=10000, description="delay")
    jitter_ms: float | None = Field(None, ge=0, le=10000, description="delay")
    rate_mbps: float | None = Field(None, gt=0, le=100000, description="rate, throttle")
    burst_kb: float | None = Field(None, gt=0, le=1000000, description="throttle")
    leaves: int | None = Field(None, ge=1, le=64, description="add_rack")
    nodes: int | None = Field(None, ge=1, le=250, description="add_rack")
    plant: list[dict[str, Any]] | None = Field(None, description="add_rack: faults in the "
                                               "rack before its acceptance")
    params: dict[str, Any] | None = Field(None, description="a plug-in kind's parameters")


HostRef = Annotated[str | int, Field(description="a host: short name (n0) or node index")]


class CommandWorkload(Section):
    """Any command in a host, from ``at_s``; ``{n5}`` in an argument is host n5's address
    (plane 0, rail 0), ``{n5.p1}`` on plane 1. Its output and exit status are recorded."""

    kind: Literal["command"] = Field(description="command: a command in a host")
    host: HostRef
    argv: list[str] = Field(min_length=1, description="the command and its arguments "
                            "({n5}: host n5's address)")
    at_s: float = Field(0, ge=0, description="seconds after traffic starts")


class Iperf3Workload(Section):
    """An iperf3 client in ``client`` to a server in ``server`` (started at once)."""

    kind: Literal["iperf3"] = Field(description="iperf3: an iperf3 client and server pair")
    client: HostRef
    server: HostRef
    at_s: float = Field(0, ge=0, description="seconds after traffic starts")
    seconds: float = Field(10, gt=0, le=3600, description="seconds the client sends")
    plane: int = Field(0, ge=0, description="the plane whose NIC it uses")
    udp: bool = Field(False, description="UDP instead of TCP")
    rate_mbps: float | None = Field(None, gt=0, description="-b: target rate (UDP default 1)")
    parallel: int = Field(1, ge=1, le=16, description="parallel streams (-P)")


class ReplayWorkload(Section):
    """A capture replayed out of a host's NIC (``python -m traffic replay``)."""

    kind: Literal["replay"] = Field(description="replay: a capture replayed out of a NIC")
    host: HostRef
    pcap: str = Field(description="pcap/pcapng file of Ethernet frames (relative: to cwd)")
    at_s: float = Field(0, ge=0, description="seconds after traffic starts")
    plane: int = Field(0, ge=0, description="the plane whose NIC it uses")
    rail: int = Field(0, ge=0, description="the rail whose NIC it uses")
    loop: int = Field(1, ge=1, le=100000, description="times the capture is replayed")
    pps: float | None = Field(None, gt=0, description="packets a second (default: as "
                                                      "captured)")
    mbps: float | None = Field(None, gt=0, description="Mb/s (instead of pps)")


class ElephantsWorkload(Section):
    """One long TCP flow (iperf3) from every host, to a destination drawn by a Hedera
    pattern (:func:`traffic.patterns.hedera`); the aggregate goodput is the fabric's
    bisection bandwidth for that pattern. Edges and pods are counted in host indices
    (``edge_hosts`` hosts an edge switch, ``pod_hosts`` a pod), so a non-blocking
    reference variant on another topology gets the same flows."""

    kind: Literal["elephants"] = Field(description="elephants: one long TCP flow from "
                                                   "every host, by a Hedera pattern")
    pattern: Literal["stride", "staggered", "random", "bijection", "hotspot"] = Field(
        description="Hedera's traffic pattern")
    stride: int = Field(1, ge=1, description="stride: host i sends to i + stride")
    edge_p: float = Field(0.0, ge=0, le=1, description="staggered: same edge switch")
    pod_p: float = Field(0.0, ge=0, le=1, description="staggered: same pod, another edge")
    edge_hosts: int = Field(1, ge=1, description="hosts per edge switch (k/2 in a fat-tree)")
    pod_hosts: int = Field(1, ge=1, description="hosts per pod (k^2/4 in a fat-tree)")
    hotspots: int = Field(2, ge=1, description="hotspot: hosts that draw several flows")
    hot_flows: int = Field(3, ge=2, description="hotspot: flows each hotspot receives")
    hosts: list[int] | None = Field(None, description="the hosts taking part (default: all)")
    at_s: float = Field(0, ge=0, description="seconds after traffic starts")
    seconds: float | None = Field(None, gt=0, le=3600, description="default: to the run's end")
    plane: int = Field(0, ge=0, description="the plane whose NIC it uses")


class AgentsWorkload(Agents):
    """The agent chains as an entry of ``workloads`` (the same as the ``agents`` section)."""

    kind: Literal["agents"] = Field(description="agents: the agent chains")
    enabled: bool = Field(True, description="run them")


class TrainingWorkload(Training):
    """The training collective as an entry of ``workloads`` (the ``training`` section)."""

    kind: Literal["training"] = Field(description="training: the training collective")
    enabled: bool = Field(True, description="run it")


class PluginWorkload(Section):
    """A workload kind of one's own (a :class:`testbed.workloads.kinds.WorkloadKind`),
    named by dotted path; its own fields under ``params:``, checked by its ``PARAMS``
    when a run loads it."""

    kind: str = Field(pattern=plugins.DOTTED.pattern, description="package.module:Class")
    host: HostRef | None = Field(None, description="the host it runs in, if it names one")
    at_s: float = Field(0, ge=0, description="seconds after traffic starts")
    plane: int = Field(0, ge=0, description="the plane whose NIC it uses")
    params: dict[str, Any] | None = Field(None, description="the kind's parameters")


WORKLOAD_KINDS = ("command", "iperf3", "replay", "elephants", "agents", "training")
#: the tag of a kind of one's own (what an unknown kind's error lists beside the names)
PLUGIN_TAG = "package.module:Class"


def kind(entry: Any) -> str | None:
    """The union member of a ``workloads`` entry: its ``kind``, or the plug-in tag
    (named after the field it reads, as errors name that field)."""
    kind = entry.get("kind") if isinstance(entry, dict) else getattr(entry, "kind", None)
    if isinstance(kind, str) and kind not in WORKLOAD_KINDS and plugins.DOTTED.fullmatch(kind):
        return PLUGIN_TAG
    return kind


Workload = Annotated[
    Annotated[CommandWorkload, Tag("command")] | Annotated[Iperf3Workload, Tag("iperf3")]
    | Annotated[ReplayWorkload, Tag("replay")] | Annotated[ElephantsWorkload, Tag("elephants")]
    | Annotated[AgentsWorkload, Tag("agents")] | Annotated[TrainingWorkload, Tag("training")]
    | Annotated[PluginWorkload, Tag(PLUGIN_TAG)],
    Discriminator(kind)]


class Workloads(Section):
    """``workloads:``: one list of everything that runs in the hosts."""

    workloads: list[Workload] = Field(default_factory=list)


#: the sections every variant has (the scenario's base, deep-merged with its overrides)
SECTIONS: dict[str, type[Section]] = {"controller": Controller, "agents": Agents,
                                      "training": Training, "qos": Qos,
                                      "switches": SwitchSettings, "acceptance": Acceptance,
                                      "replacement": Replacement}
