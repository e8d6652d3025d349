"""The keys of the results records (:mod:`testbed.core.records`): a field's model
and the fields that several records share (a run's entry, a chain, a hop, an
iteration, telemetry, fidelity samples, ...)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Field:
    """One key of a record: its path, JSON type, unit (empty: none) and meaning."""

    name: str
    type: str
    unit: str
    meaning: str
    required: bool = True


@dataclass(frozen=True)
class Record:
    """One file (or family of files) of a results folder.

    ``where``: ``run`` (the results folder), ``variant`` (a variant's folder) or ``lab``
    (a lab's folder, ``testbed up``). ``closed``: a key no field describes is an error
    (the record files analysis reads); open records (documents of many shapes, such as
    a summary) are checked for the fields listed only.
    """

    pattern: str
    where: str
    format: str
    writer: str
    meaning: str
    fields: tuple[Field, ...] = ()
    closed: bool = False


def F(name: str, type_: str, unit: str, meaning: str, required: bool = True) -> Field:
    return Field(name, type_, unit, meaning, required)


def opt(name: str, type_: str, unit: str, meaning: str) -> Field:
    return Field(name, type_, unit, meaning, required=False)


EPOCH = "s (Unix time)"
LATENCY = ("p50", "p95", "p99", "max")


def _pcts(prefix: str, unit: str, what: str, keys: tuple[str, ...] = LATENCY,
          nullable: bool = True) -> tuple[Field, ...]:
    t = "float|null" if nullable else "float"
    return tuple(F(f"{prefix}.{k}", t, unit, f"{what}: {k}") for k in keys)


RUN_FIELDS = (
    F("runs[].name", "str", "", "the variant's name"),
    F("runs[].run_id", "str", "", "the short id in every name the variant created"),
    F("runs[].seed", "int", "", "the seed this entry ran with"),
    F("runs[].dir", "str", "", "the variant's folder, relative to the results folder"),
    opt("runs[].seeds", "list", "", "with several seeds: one entry like this one per seed"),
    F("runs[].fabric.switches", "int", "", "switches of the fabric"),
    F("runs[].fabric.hosts", "int", "", "hosts of the fabric"),
    F("runs[].fabric.links", "int", "", "links of the fabric"),
    F("runs[].fabric.start_s", "float", "s", "bring-up time"),
    F("runs[].fabric.stop_s", "float", "s", "teardown time"),
    F("runs[].agents.chains_started", "int", "", "agent chains started"),
    F("runs[].agents.chains_completed", "int", "", "agent chains completed"),
    F("runs[].agents.chains_failed", "int", "", "agent chains failed"),
    *_pcts("runs[].agents.latency_ms", "ms", "end-to-end chain latency"),
    F("runs[].training.bytes", "int", "bytes", "bytes all training ranks received"),
    F("runs[].training.goodput_mbps", "float", "Mb/s", "aggregate training goodput"),
    F("runs[].training.iterations", "int", "", "iterations every rank completed"),
    *_pcts("runs[].training.iteration_ms", "ms", "iteration time", ("p50", "p99")),
    opt("runs[].fidelity.ok", "bool", "", "false: the host did not keep up, do not trust"),
    opt("runs[].fidelity.reasons", "list", "", "why the fidelity monitor flagged the run"),
    opt("runs[].faults", "list", "", "one entry a fault: its window, detection, repair "
        "and what it cost the chains and training (``faults`` of the report)"),
    opt("runs[].qos", "object", "", "traffic classes, PFC and the storm's spread"),
    opt("runs[].telemetry", "object", "", "queue and utilisation statistics per port role"),
)

CHAIN_FIELDS = (
    F("chain", "int", "", "the chain's number in the run"),
    F("template", "str", "", "the chain template (rag, tool-use, multi-agent, ...)"),
    F("start", "float", EPOCH, "when the chain's first hop was sent"),
    F("end", "float", EPOCH, "when its last reply arrived (or it gave up)"),
    F("steps", "int", "", "hops the template has"),
    F("hops_done", "int", "", "hops that completed"),
    F("ok", "bool", "", "every hop completed"),
    F("error", "str|null", "", "why the chain failed"),
    F("latency_ms", "float", "ms", "end-to-end latency, start to end"),
    F("hop_sum_ms", "float", "ms", "the sum of its hops' latencies"),
)

HOP_FIELDS = (
    F("chain", "int", "", "the chain this hop belongs to"),
    F("template", "str", "", "the chain's template"),
    F("hop", "int", "", "the hop's index in its chain (0 first)"),
    F("service", "str", "", "the service called (retriever, tool, model, agent)"),
    F("address", "str", "", "ip:port the request went to"),
    F("plane", "int|null", "", "the plane that carried it"),
    F("start", "float", EPOCH, "when the request was sent"),
    F("latency_ms", "float", "ms", "request sent to reply received"),
    F("request", "int", "bytes", "request size"),
    F("reply", "int", "bytes", "reply size"),
    F("service_us", "int", "us", "service time the server spent before replying"),
    F("ok", "bool", "", "the reply arrived"),
    F("error", "str|null", "", "why not"),
    F("preferred", "int|null", "", "the plane the driver tried first"),
    F("tried", "list", "", "the planes tried, in order"),
)

ITERATION_FIELDS = (
    F("rank", "int", "", "the training rank"),
    F("iteration", "int", "", "the iteration's number"),
    F("start", "float", EPOCH, "iteration start"),
    F("end", "float", EPOCH, "iteration end"),
    F("iteration_ms", "float", "ms", "compute plus communication"),
    F("comm_ms", "float", "ms", "the collective's communication time"),
    F("compute_ms", "float", "ms", "the emulated compute time"),
    F("send_ms", "float", "ms", "time spent sending"),
    F("bytes_sent", "int", "bytes", "bytes sent"),
    F("bytes_received", "int", "bytes", "bytes received"),
    F("packets_sent", "int", "packets", "RoCEv2 packets sent"),
    F("packets_received", "int", "packets", "RoCEv2 packets received"),
    F("packets_lost", "int", "packets", "packets counted lost at a step's time-out"),
    F("timeouts", "int", "", "steps that timed out"),
    F("icrc_errors", "int", "packets", "packets with a bad ICRC"),
    F("stale_packets", "int", "packets", "arrived after their step was given up"),
    F("foreign_packets", "int", "packets", "packets of another flow"),
    F("reordered_packets", "int", "packets", "arrived out of order"),
    F("duplicate_packets", "int", "packets", "arrived twice"),
    F("ce_received", "int", "packets", "ECN congestion-experienced marks received"),
    F("cnps_sent", "int", "packets", "DCQCN congestion notification packets sent"),
    F("cnps_received", "int", "packets", "CNPs received"),
    F("send_to", "int", "", "the rank this one sends to"),
    F("steps", "int", "", "collective steps done"),
    F("complete", "bool", "", "every step done"),
    F("channels", "int", "", "NIC channels (planes or rails) used"),
    F("send_errors", "int", "", "failed sends"),
    F("hurt_steps", "list", "[s (Unix time), packets, count]",
      "steps that lost packets or timed out: [start, lost, timeouts]"),
    opt("rate_mbps", "list", "Mb/s", "DCQCN: each queue pair's rate at the iteration's end"),
    opt("rate_trace", "list", "", "DCQCN: rate changes during the iteration"),
)

TELEMETRY_FIELDS = (
    F("t", "float", EPOCH, "sample time"),
    F("switch", "str", "", "the switch"),
    opt("port", "int", "", "OpenFlow port number (a port sample)"),
    opt("ifname", "str", "", "the port's interface"),
    opt("role", "str", "", "leaf_uplink, leaf_downlink, spine_downlink, ..."),
    opt("tx_bytes", "int", "bytes", "bytes sent, cumulative"),
    opt("rx_bytes", "int", "bytes", "bytes received, cumulative"),
    opt("tx_packets", "int", "packets", "packets sent, cumulative"),
    opt("tx_dropped", "int", "packets", "packets dropped on send, cumulative"),
    opt("backlog_bytes", "int", "bytes", "egress queue backlog at the sample"),
    opt("qdisc_drops", "int", "packets", "egress queue drops, cumulative"),
    opt("util", "float", "fraction", "egress utilisation since the last sample (0-1)"),
    opt("same", "list", "", "a line of this shape lists ports unchanged since their "
        "last sample (their previous values hold)"),
    opt("marking", "bool", "", "ECN marking is on at the port"),
    opt("ecn_marked", "int", "packets", "packets marked CE, cumulative"),
)

FIDELITY_FIELDS = (
    F("t", "float", EPOCH, "sample time"),
    F("interval_s", "float", "s", "time since the previous sample"),
    F("measuring", "bool", "", "traffic was running (only these samples are judged)"),
    F("cpus", "int", "", "CPUs of the host"),
    F("host_idle", "float", "fraction", "idle share of the host's CPU"),
    F("ovs_processes", "int", "", "ovs-vswitchd processes"),
    F("ovs_cores", "float", "cores", "CPU used by ovs-vswitchd"),
    F("ovs_thread_cores", "float", "cores", "CPU used by its busiest thread"),
    F("ovs_thread", "str|null", "", "that thread's name"),
    F("helpers_cores", "float", "cores", "CPU used by the lab's helpers"),
    F("helpers", "int", "", "helper processes"),
    opt("helpers_top", "list", "[str, cores]", "the busiest kinds of helper (a Python "
        "module with its subcommand, else the program), at most three"),
    F("runner_cores", "float", "cores", "CPU used by the runner"),
    F("other_cores", "float", "cores", "CPU used by everything else"),
    F("links", "int", "", "shaped links watched"),
    F("saturated", "list", "", "saturated links with ``delivered``: what their queue sent "
      "over what it owed the wire (fraction)"),
)

CLASS_TELEMETRY_FIELDS = (
    opt("classes", "list", "", "header line: the traffic classes, in the order of each "
        "port's list"),
    opt("fields", "list", "", "header line: the order of each class's counters "
        "(bytes, drops, backlog)"),
    opt("t", "float", "s (since the PFC agent started)", "sample time"),
    opt("ports", "object", "[bytes, packets, bytes]", "per port, per class: [bytes sent "
        "(cumulative), drops (cumulative), backlog], or null for a class the port lacks"),
)

PFC_EVENT_FIELDS = (
    F("t", "float", "s (since the PFC agent started)", "when"),
    opt("port", "str", "", "the interface"),
    opt("switch", "str", "", "the switch (xoff/xon lines)"),
    opt("priority", "int", "", "the PFC priority"),
    opt("state", "str", "", "paused or running: a queue's new state"),
    opt("failed", "str", "", "a state change that failed"),
    opt("error", "str", "", "why it failed"),
    opt("xoff", "list", "", "ports the switch sent XOFF to"),
    opt("xon", "list", "", "ports the switch sent XON to"),
    opt("congested", "list", "", "the congested ports that caused the XOFF"),
    opt("watchdog", "str", "", "the watchdog: drop (a queue set to drop) or restored"),
    opt("storm", "str", "", "a host NIC's PAUSE storm: start or stop"),
)

PROBE_FIELDS = (
    opt("s", "str", "", "sample line: the sending probe"),
    opt("d", "str", "", "sample line: the receiving probe (this file's)"),
    opt("q", "int", "", "sample line: the sequence number"),
    opt("t", "float", EPOCH, "sample line: sent"),
    opt("r", "float", EPOCH, "sample line: received"),
    opt("start", "str", "", "first line: this probe's name"),
    opt("t0", "float", EPOCH, "first line: when it started sending"),
    opt("rate", "float", "1/s", "first line: probes a second to each peer"),
    opt("bind", "str", "", "first line: its address"),
    opt("peers", "list", "", "first line: the probes it sends to"),
    opt("stop", "str", "", "last line: this probe's name"),
    opt("sent", "object", "", "last line: probes sent, per peer"),
)

FAULT_FIELDS = (
    F("t0", "float", EPOCH, "the time at_s counts from (traffic start)"),
    F("end", "float", EPOCH, "the end of the fault schedule"),
    F("records[].at_s", "float", "s", "planned time after t0"),
    F("records[].action", "str", "", "the fault's action (link_down, degrade, ...)"),
    F("records[].target", "str", "", "the link or node it acted on"),
    F("records[].planned", "float", EPOCH, "planned time"),
    F("records[].started", "float", EPOCH, "when the action started"),
    F("records[].done", "float", EPOCH, "when the action returned"),
    F("records[].ok", "bool", "", "the action succeeded"),
    F("records[].error", "str|null", "", "why not"),
    F("records[].result", "any", "", "what the action reported"),
    F("records[].lateness_ms", "float", "ms", "started minus planned"),
)

CONTROLLER_EVENT_FIELDS = (
    F("t", "float", EPOCH, "when"),
    F("event", "str", "", "what happened (started, connected, installed, cpu, moved, "
      "port_status, ...); the other keys depend on it"),
)


#: ``fit`` of summary.json and manifest.json: what ``testbed run --fit`` decided
FIT_FIELDS = (
    opt("fit", "object", "", "only with --fit: every rate of the scenario scaled by one "
        "factor to fit this host (testbed.cluster.fit)"),
    F("fit.factor", "float", "", "every rate (links, traffic, rate thresholds) times this; "
      "1.0: as shipped"),
    F("fit.scaled", "bool", "", "factor below 1: the results are of the scaled scenario"),
    F("fit.host_cores", "float", "cores", "the cores this run could use (CPU affinity, "
      "cgroup quota)"),
    F("fit.datapath", "str", "", "Open vSwitch's datapath here: userspace or kernel"),
    F("fit.basis", "str", "", "checked (at least the host it was checked clean on), "
      "model (the sizing model alone) or checked+model (the model calibrated there)"),
    F("fit.margin", "float", "", "every predicted need raised by this share (the model's "
      "error)"),
    F("fit.variant", "str|null", "", "the variant nearest the monitor's limits"),
    F("fit.predicted_cores", "float|null", "cores", "that variant's predicted busy cores "
      "at the factor (before the margin)"),
    F("fit.predicted_thread_cores", "float|null", "cores", "its busiest switch thread, "
      "predicted at the factor"),
    F("fit.predicted_cores_at_1", "float|null", "cores", "the busiest variant's predicted "
      "cores as shipped (factor 1.0)"),
    F("fit.reference", "object|null", "", "where the scenario was checked clean "
      "(scenarios/checked.json), if it was"),
    F("fit.calibration", "list|null", "", "measured over predicted on that host: "
      "[cores, switch thread]"),
    F("fit.approximated", "list", "", "what the model approximates in these variants"),
    F("fit.line", "str", "", "the line the run printed"),
)
