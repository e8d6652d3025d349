"""What each file of a results folder holds: its format, fields, types and units.

One table, :data:`RECORDS`, keyed by the name :mod:`testbed.core.layout` gives the file.
The docs build turns it into the results reference (:func:`reference_page`), and the
tests check real results folders against it (:func:`check_folder`): a file no entry
describes, or a described field missing or of another type, is a finding.

Types are JSON's, in Python words: ``int``, ``float`` (an int is a float too), ``str``,
``bool``, ``list``, ``object``, ``any``; ``|null`` allows ``null``. A field's name is a path:
``runs[].agents.latency_ms.p99`` is the key ``p99`` of ``latency_ms`` of ``agents`` of
every item of the list ``runs``.

>>> rec = RECORDS["CHAINS"]
>>> rec.pattern, rec.format, field_of(rec, "latency_ms").unit
('chains.jsonl', 'jsonl', 'ms')
>>> check_records(rec, [{"chain": 1}])[:1]
['chains.jsonl: line 1: template missing']
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from testbed.core import layout


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


def _rec(pattern: str, where: str, fmt: str, writer: str, meaning: str,
         fields: tuple[Field, ...] = (), closed: bool = False) -> Record:
    return Record(pattern, where, fmt, writer, meaning, fields, closed)


#: every record of a results folder, by its name in :mod:`testbed.core.layout`
RECORDS: dict[str, Record] = {
    # the results folder
    "SUMMARY": _rec(layout.SUMMARY, "run", "json", "testbed.core.runner",
                    "the run's numbers: one entry a variant (``runs``), the contract "
                    "reports and comparisons read", (
                        F("scenario", "str", "", "the scenario's name"),
                        F("kind", "str", "", "the experiment kind"),
                        F("seed", "int", "", "the first seed"),
                        F("seeds", "list", "", "every seed"),
                        F("duration_s", "float", "s", "traffic time per variant"),
                        F("capabilities", "object", "", "the host's probed kernel "
                          "features and the backends chosen"),
                        F("started", "str", "ISO 8601", "when the run started"),
                        opt("finished", "str", "ISO 8601", "when it finished"),
                        F("runs", "list", "", "one entry a variant"),
                        *FIT_FIELDS,
                        *RUN_FIELDS)),
    "MANIFEST": _rec(layout.MANIFEST, "run", "json", "testbed.core.runner",
                     "what the run was measured on: scenario (and its source), seed, "
                     "versions, capabilities, the fidelity verdict", (
                         F("scenario", "str", "", "the scenario's name"),
                         F("seed", "int", "", "the first seed"),
                         F("capabilities", "object", "", "the host's probed features"),
                         F("runs", "list", "", "the variants run"),
                         opt("fidelity", "object", "", "did the host keep up, per variant"),
                         opt("scenario_source", "object", "", "the scenario file as read "
                             "(with --fit: its rates scaled)"),
                         *FIT_FIELDS,
                     )),
    "DIGEST": _rec(layout.DIGEST, "run", "json", "testbed.core.digest",
                   "the SHA-256 of every other file of the results folder, written when the "
                   "run is done; testbed check refuses a folder whose files no longer match "
                   "(it stops a casual edit, not a determined one)", (
                       F("algorithm", "str", "", "sha256"),
                       F("files", "object", "", "each file's path relative to the folder -> "
                         "its SHA-256 (hex)"),
                       F("digest", "str", "", "SHA-256 of the lines 'HASH  PATH' of "
                         "files, sorted by path"),
                   ), closed=True),
    "REPORT": _rec(layout.REPORT, "run", "markdown", "testbed.reports.report",
                   "the report: tables, figures, the fidelity verdict"),
    "CHAIN_PLOT": _rec(layout.CHAIN_PLOT, "run", "png", "testbed.reports.plots",
                       "chain latency per variant"),
    "TRAINING_PLOT": _rec(layout.TRAINING_PLOT, "run", "png", "testbed.reports.plots",
                          "training iteration times per variant"),
    "GOODPUT_PLOT": _rec(layout.GOODPUT_PLOT, "run", "png", "testbed.reports.plots",
                         "training goodput per variant"),
    "BISECTION_PLOT": _rec(layout.BISECTION_PLOT, "run", "png", "testbed.reports.plots",
                           "bisection bandwidth per variant"),
    "DCQCN_PLOT": _rec(layout.DCQCN_PLOT, "run", "png", "testbed.reports.plots",
                       "DCQCN rates over time"),
    "CHECKPOINT_LAG_PLOT": _rec(layout.CHECKPOINT_LAG_PLOT, "run", "png",
                                "testbed.storage.replication",
                                "cross-region checkpoint lag over time"),
    "TIMELINE_PLOT_GLOB": _rec(layout.TIMELINE_PLOT_GLOB, "run", "png",
                               "testbed.reports.resilience",
                               "a faulted variant's timeline: chain latency, training "
                               "and probe loss around each fault"),
    # a variant's folder: agent chains
    "CHAINS": _rec(layout.CHAINS, "variant", "jsonl", "traffic.agent_driver",
                   "one line an agent chain", CHAIN_FIELDS, closed=True),
    "HOPS": _rec(layout.HOPS, "variant", "jsonl", "traffic.agent_driver",
                 "one line a hop of a chain (a request to a service and its reply)",
                 HOP_FIELDS, closed=True),
    "AGENT_PLAN": _rec(layout.AGENT_PLAN, "variant", "json", "testbed.workloads.chains",
                       "the chains' plan: services and their addresses, chain templates", (
                           F("services", "object", "", "service -> [[ip, port], ...]"),
                           F("chains", "list", "", "templates: name, weight, steps "
                             "(service, request and reply in bytes, service_us)"),
                       )),
    "SERVICE_DIRECTORY": _rec(layout.SERVICE_DIRECTORY, "variant", "json",
                              "testbed.operations.replace",
                              "where services are now, for the driver (a node replaced)", (
                                  F("services", "object", "", "service -> [[ip, port]]"),)),
    "DRIVER_SUMMARY": _rec(layout.DRIVER_SUMMARY, "variant", "json",
                           "traffic.agent_driver",
                           "the chain driver's own summary (empty if it was stopped "
                           "before writing it)", (
                               F("chains_started", "int", "", "chains started"),
                               F("chains_completed", "int", "", "chains completed"),
                               F("chains_failed", "int", "", "chains failed"),
                               *_pcts("latency_ms", "ms", "chain latency"),
                               *_pcts("hop_latency_ms", "ms", "hop latency", ("p50", "p99")),
                               F("templates", "object", "", "per template: completed, "
                                 "failed, latency_ms"),
                               F("elapsed_s", "float", "s", "the driver's run time"),
                           )),
    "DRIVER_LOG": _rec(layout.DRIVER_LOG, "variant", "log", "traffic.agent_driver",
                       "the chain driver's log"),
    "SERVICE_STATS_GLOB": _rec(layout.SERVICE_STATS_GLOB, "variant", "json",
                               "traffic.agent_service", "one agent service's counters", (
                                   F("role", "str", "", "the service"),
                                   F("listen", "list", "", "ip:port it listened on"),
                                   F("started", "float", EPOCH, "start"),
                                   F("stopped", "float", EPOCH, "stop"),
                                   F("requests", "int", "", "requests served"),
                                   F("bytes_in", "int", "bytes", "bytes received"),
                                   F("bytes_out", "int", "bytes", "bytes sent"),
                                   F("errors", "int", "", "failed requests"),
                               )),
    "SERVICE_LOG_GLOB": _rec(layout.SERVICE_LOG_GLOB, "variant", "log",
                             "traffic.agent_service", "one agent service's log"),
    # training
    "TRAINING_CONFIG": _rec(layout.TRAINING_CONFIG, "variant", "json",
                            "testbed.workloads.generators",
                            "the training ranks' configuration", (
                                F("bytes", "int", "bytes", "all-reduce size an iteration"),
                                F("compute_ms", "float", "ms", "emulated compute"),
                                F("rate_mbps", "float", "Mb/s", "each rank's send rate "
                                  "a plane"),
                                F("payload", "int", "bytes", "RoCE payload a packet"),
                                F("ranks", "list", "", "each rank's channels (iface, ip, "
                                  "mac)"),
                                F("pattern", "str", "", "the collective (ring, ...)"),
                            )),
    "RANK_GLOB": _rec(layout.RANK_GLOB, "variant", "jsonl", "traffic.training",
                      "one line an iteration of one training rank", ITERATION_FIELDS,
                      closed=True),
    "RANK_LOG_GLOB": _rec(layout.RANK_LOG_GLOB, "variant", "log", "traffic.training",
                          "one training rank's log and final summary"),
    "WORKLOAD_LOG_GLOB": _rec(layout.WORKLOAD_LOG_GLOB, "variant", "log",
                              "testbed.workloads.kinds", "a listed workload's log"),
    "WORKLOAD_OUT_GLOB": _rec(layout.WORKLOAD_OUT_GLOB, "variant", "text",
                              "testbed.workloads.kinds",
                              "a command workload's standard output (workload-I-NAME.out)"),
    "WORKLOAD_JSON_GLOB": _rec(layout.WORKLOAD_JSON_GLOB, "variant", "json",
                               "testbed.workloads.kinds",
                               "an iperf3 or replay workload's JSON report "
                               "(workload-I-iperf3.json, -replay.json, -flowK.json)"),
    # the controller and the fabric
    "SPEC": _rec(layout.SPEC, "variant", "json", "testbed.fabric.bringup",
                 "the topology spec the variant ran: hosts, switches, links", (
                     F("prefix", "str", "", "the name prefix (tb + run id)"),
                     F("planes", "int", "", "planes"),
                     F("link_mbps", "float", "Mb/s", "link rate"),
                     F("mtu", "int", "bytes", "MTU"),
                     F("queue_kb", "int", "KB", "egress buffer a port"),
                     F("hosts", "list", "", "hosts and their NICs"),
                     F("switches", "list", "", "switches, tier, plane"),
                     F("links", "list", "", "links: ends, rate, role"),
                 )),
    "PLACEMENT": _rec(layout.PLACEMENT, "variant", "json", "testbed.fabric.bringup",
                      "where each switch and host ran when the fabric was spread over "
                      "several machines", (
                          F("servers", "list", "", "the machines, here first"),
                          F("tunnel", "str|null", "", "the tunnel between them"),
                      )),
    "CONTROLLER_CONFIG": _rec(layout.CONTROLLER_CONFIG, "variant", "json",
                              "testbed.fabric.bringup", "the controller's configuration", (
                                  F("mode", "str", "", "routing mode"),
                                  F("telemetry_ms", "int", "ms", "telemetry interval"),
                                  F("ecn", "object", "", "ECN policy"),
                                  F("fast_failover", "bool", "", "fast-failover groups"),
                                  F("recompute", "bool", "", "recompute paths on failure"),
                                  F("health", "object", "", "the health monitor"),
                              )),
    "CONTROLLER_LOG": _rec(layout.CONTROLLER_LOG, "variant", "log", "controllers",
                           "the controller's log"),
    "CONTROLLER_EVENTS": _rec(layout.CONTROLLER_EVENTS, "variant", "jsonl", "controllers",
                              "the controller's events, one a line",
                              CONTROLLER_EVENT_FIELDS),
    "TELEMETRY": _rec(layout.TELEMETRY, "variant", "jsonl", "controllers",
                      "port counters and queues of every switch port, sampled by the "
                      "controller", TELEMETRY_FIELDS, closed=True),
    "TELEMETRY_PLOT": _rec(layout.TELEMETRY_PLOT, "variant", "png",
                           "testbed.reports.telemetry", "queues and utilisation over time"),
    "FIDELITY": _rec(layout.FIDELITY, "variant", "jsonl", "testbed.core.fidelity",
                     "the fidelity monitor's samples, one a second: did the host keep up",
                     FIDELITY_FIELDS, closed=True),
    "SWITCH_PROCESSES_LOG": _rec(layout.SWITCH_PROCESSES_LOG, "variant", "log",
                                 "testbed.fabric.switchd", "the lab's own ovs-vswitchd instances"),
    # faults
    "FAULTS": _rec(layout.FAULTS, "variant", "json", "testbed.faults.run",
                   "the fault schedule as it ran", FAULT_FIELDS),
    "PROBE_GLOB": _rec(layout.PROBE_GLOB, "variant", "jsonl", "traffic.probe",
                       "one probe's UDP packets (a start line, a line a packet received, "
                       "a stop line)", PROBE_FIELDS, closed=True),
    "PROBE_LOG_GLOB": _rec(layout.PROBE_LOG_GLOB, "variant", "log", "traffic.probe",
                           "one probe's log"),
    "REPLACEMENT": _rec(layout.REPLACEMENT, "variant", "json", "testbed.operations.replace",
                        "node health and replacements during the run", (
                            F("watched", "list", "", "nodes watched"),
                            F("rule", "object", "", "the health rule (window_s, "
                              "loss_max, latency_max_ms, confirm)"),
                            F("events", "list", "", "declarations and replacements"),
                            F("windows", "list", "", "every health window"),
                        )),
    # traffic classes and PFC
    "PFC": _rec(layout.PFC, "variant", "json", "testbed.fabric.pfc",
                "per-port, per-class counters and PFC at the end of the run", (
                    F("ports", "object", "", "per port: switch, frames_rx, frames_tx, "
                      "xoff_tx, xon_tx, classes (bytes, drops, peak_backlog_bytes; "
                      "lossless classes also paused_s, pauses, watchdog_events)"),
                )),
    "PFC_EVENTS": _rec(layout.PFC_EVENTS, "variant", "jsonl", "testbed.fabric.pfc",
                       "PFC as it happened: pauses, XOFF/XON, the watchdog, storms",
                       PFC_EVENT_FIELDS, closed=True),
    "PFC_STORMS": _rec(layout.PFC_STORMS, "variant", "folder", "testbed.faults.fabric",
                       "a file a host NIC that storms PAUSE (named after the NIC)"),
    "CLASS_TELEMETRY": _rec(layout.CLASS_TELEMETRY, "variant", "jsonl",
                            "testbed.fabric.pfc",
                            "per-port, per-class counters, 10 samples a second; the "
                            "first line names the classes", CLASS_TELEMETRY_FIELDS,
                            closed=True),
    "QOS_PLOT": _rec(layout.QOS_PLOT, "variant", "png", "testbed.reports.qos",
                     "per-class throughput, queues and pauses"),
    "PFC_CONFIG": _rec(layout.PFC_CONFIG, "variant", "json", "testbed.fabric.bringup",
                       "the PFC agent's configuration", (
                           F("pfc", "bool", "", "PFC on"),
                           F("poll_ms", "int", "ms", "queue poll interval"),
                           F("xoff", "int", "bytes", "XOFF threshold"),
                           F("xon", "int", "bytes", "XON threshold"),
                           F("ports", "list", "", "ports: ifname, mbps, switch, role, peer"),
                       )),
    "PFC_LOG": _rec(layout.PFC_LOG, "variant", "log", "testbed.fabric.pfc",
                    "the PFC agent's log"),
    # MACsec
    "MACSEC_KEYS": _rec(layout.MACSEC_KEYS, "variant", "json", "testbed.experiments.macsec",
                        "the SAKs of a protected run (mode 0600), for testbed decrypt", (
                            F("links", "list", "", "per link: its keys"),)),
    "WIRE_PCAP": _rec(layout.WIRE_PCAP, "variant", "pcap",
                      "testbed.experiments.macsec, testbed.experiments.backbone",
                      "frames of one protected wire, as an eavesdropper sees them"),
    "TCPDUMP_LOG": _rec(layout.TCPDUMP_LOG, "variant", "log",
                        "testbed.experiments.macsec, testbed.experiments.backbone",
                        "the capture's log"),
    "BULK": _rec(layout.BULK, "variant", "json", "testbed.experiments.macsec",
                 "the bulk iperf3 flow (iperf3's JSON report)", (
                     F("end", "object", "", "iperf3's totals (sum_sent, sum_received: "
                       "bytes, bits_per_second)"),)),
    "MACSEC_LINK": _rec(layout.MACSEC_LINK, "variant", "folder", "testbed.macsec.link",
                        "the protected link's configuration (keys left out) and its "
                        "helpers' files"),
    "ATTACK": _rec(layout.ATTACK, "variant", "json", "testbed.experiments.macsec",
                   "the injected and replayed frames"),
    # backbone
    "LOSS_TIMELINE": _rec(layout.LOSS_TIMELINE, "variant", "json",
                          "testbed.experiments.backbone",
                          "the backbone probes' loss in 100 ms bins", (
                              F("t0", "float", EPOCH, "the first bin's start"),
                              F("bin_s", "float", "s", "bin width"),
                              F("loss", "list", "", "loss per bin"),
                          )),
    "PROBE_LOSS_PLOT": _rec(layout.PROBE_LOSS_PLOT, "variant", "png",
                            "testbed.experiments.backbone", "probe loss over time"),
    "REPLICATION_GLOB": _rec(layout.REPLICATION_GLOB, "variant", "json",
                             "testbed.experiments.backbone",
                             "a replication flow across the backbone (iperf3's JSON report)"),
    "BACKBONE_PROBES_GLOB": _rec(layout.BACKBONE_PROBES_GLOB, "variant", "jsonl",
                                 "traffic.probe", "one region's backbone probes (the "
                                 "lines of a fabric run's probe file)", PROBE_FIELDS,
                                 closed=True),
    # storage
    "STORE_LOG": _rec(layout.STORE_LOG, "variant", "log", "testbed.storage",
                      "the object store's log"),
    "LOAD_LOG": _rec(layout.LOAD_LOG, "variant", "log", "testbed.storage",
                     "the storage scenario's loader"),
    "READS": _rec(layout.READS, "variant", "jsonl", "traffic.object_reads",
                  "one line an object read", (
                      F("t", "float", EPOCH, "when the read ended"),
                      F("key", "str", "", "the object"),
                      F("status", "int", "", "HTTP status (0: no answer)"),
                      F("bytes", "int", "bytes", "bytes read"),
                      F("cache", "str|null", "", "the cache's verdict header"),
                      opt("error", "str", "", "the exception, if any"),
                      F("seconds", "float", "s", "read time"),
                  ), closed=True),
    "CHECKPOINT_WRITES": _rec(layout.CHECKPOINT_WRITES, "variant", "jsonl",
                              "testbed.storage.checkpoints",
                              "cross-region checkpoints: one line a write", (
                                  F("i", "int", "", "the write's number"),
                                  F("key", "str", "", "the object"),
                                  F("t_start", "float", EPOCH, "write start"),
                                  F("t_ack", "float", EPOCH, "acknowledged"),
                                  F("write_ms", "float", "ms", "write time"),
                                  F("bytes", "int", "bytes", "object size"),
                                  F("sha256", "str", "", "its digest"),
                              )),
    "CHECKPOINT_ARRIVALS": _rec(layout.CHECKPOINT_ARRIVALS, "variant", "jsonl",
                                "testbed.storage.checkpoints",
                                "one line a file seen in the second region", (
                                    F("key", "str", "", "the object"),
                                    F("t", "float", EPOCH, "when it was seen"),
                                    F("t_poll", "float", EPOCH, "the poll that saw it"),
                                    F("t_prev", "float|null", EPOCH, "the poll before"),
                                    F("t_read", "float", EPOCH, "read back"),
                                    F("bytes", "int", "bytes", "bytes read"),
                                    F("sha256_ok", "bool", "", "its digest matched"),
                                ), closed=True),
    "CHECKPOINT_TIMELINE": _rec(layout.CHECKPOINT_TIMELINE, "variant", "json",
                                "testbed.storage.replication",
                                "replication lag and data in flight over time", (
                                    F("t0", "float", EPOCH, "time origin"),
                                    F("bin_s", "float", "s", "bin width"),
                                    F("in_flight", "list", "", "data in flight per bin"),
                                    F("lag", "list", "[s, ms]", "[t - t0, lag_ms] a write"),
                                    F("write", "list", "[s, ms]", "[t - t0, write_ms]"),
                                )),
    "READ_LOAD_GLOB": _rec(layout.READ_LOAD_GLOB, "variant", "jsonl",
                           "testbed.storage.s3",
                           "one parallel reader of the throughput test (load-N-I.json: "
                           "N readers, reader I)", (
                               F("reads", "int", "", "objects read"),
                               F("errors", "int", "", "failed reads"),
                               F("bytes", "int", "bytes", "bytes read"),
                               F("start", "float", EPOCH, "first read"),
                               F("end", "float", EPOCH, "last read done"),
                           )),
    "FILER_SYNC_LOG": _rec(layout.FILER_SYNC_LOG, "variant", "log",
                           "testbed.storage.replication",
                           "the asynchronous replication between the regions"),
    # a lab's folder (testbed up)
    "ACCEPTANCE": _rec(layout.ACCEPTANCE, "lab", "folder", "testbed.acceptance.system",
                       "the acceptance checks' collectives: TAG-config.json and "
                       "TAG-rankN.jsonl (the training record above) and logs"),
    "CAPTURE_GLOB": _rec(layout.CAPTURE_GLOB, "variant", "pcap", "testbed.lab.capture",
                         "a scenario's capture of one port (capture-PORT.pcap)"),
    "LAB_REQUEST": _rec(layout.LAB_REQUEST, "lab", "json", "testbed.lab.commands",
                        "what testbed up asked its supervisor for", FIT_FIELDS),
    "SUPERVISOR_LOG": _rec(layout.SUPERVISOR_LOG, "lab", "log", "testbed.lab",
                           "the lab supervisor's log"),
    "LAB_FAULTS": _rec(layout.LAB_FAULTS, "lab", "jsonl", "testbed.lab.state",
                       "faults applied by hand (testbed fault), as applied", (
                           F("t", "float", EPOCH, "when"),
                           F("kind", "str", "", "the fault"),
                           F("target", "str|null", "", "its target"),
                           F("text", "str", "", "what was done"),
                       ), closed=True),
    "LIVE_CHECK_FIDELITY": _rec(layout.LIVE_CHECK_FIDELITY, "lab", "jsonl",
                                "testbed.reports.live_checks",
                                "the fidelity monitor's samples while `testbed check "
                                "--lab` graded the lab (a failure on an overloaded host "
                                "grades RERUN)", FIDELITY_FIELDS, closed=True),
    "MONITOR_LOG": _rec(layout.MONITOR_LOG, "lab", "log", "testbed.monitor",
                        "the lab monitor's log"),
    "MONITOR_STATUS": _rec(layout.MONITOR_STATUS, "lab", "jsonl", "testbed.monitor",
                           "where the monitor listens or why not (in the run folder)"),
    "MONITOR_BACKBONE": _rec(layout.MONITOR_BACKBONE, "lab", "json",
                             "testbed.lab.backbone_lab",
                             "a backbone lab described for its monitor"),
    "PROMETHEUS_LOG": _rec(layout.PROMETHEUS_LOG, "lab", "log", "testbed.monitor",
                           "the lab's own Prometheus"),
    "PROMETHEUS_SNAPSHOT": _rec(layout.PROMETHEUS_SNAPSHOT, "lab", "folder",
                                "testbed.monitor",
                                "its samples (a TSDB snapshot), kept when the lab went "
                                "down"),
    "GRAFANA": _rec(layout.GRAFANA, "lab", "folder", "testbed.monitor.grafana",
                    "Grafana provisioning for that Prometheus"),
    # last: what no entry above describes
    "HELPER_LOG_GLOB": _rec(layout.HELPER_LOG_GLOB, "variant", "log", "testbed.host.procs",
                            "any other helper process's output, named after the helper "
                            "(routes-NODE.log, iperf-sI.log, store-REGION.log, ...)"),
}


def field_of(record: Record, name: str) -> Field:
    return next(f for f in record.fields if f.name == name)


def layout_names() -> list[str]:
    """Every record file name :mod:`testbed.core.layout` defines (its upper-case strings
    other than the folder of variants)."""
    return [n for n, v in vars(layout).items()
            if n.isupper() and isinstance(v, str) and n != "VARIANTS"]


def describing(name: str, where: str) -> str | None:
    """The :data:`RECORDS` key whose pattern matches a file's name in ``where``."""
    for key, rec in RECORDS.items():
        if rec.where == where and fnmatch.fnmatchcase(name, rec.pattern):
            return key
    return None


# -- checking a record against its fields ----------------------------------------------
_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,),
          "list": (list,), "object": (dict,), "null": (type(None),), "any": (object,)}


def type_ok(value: object, type_: str) -> bool:
    """``value`` has JSON type ``type_`` (``float|null``: a number or null).

    >>> type_ok(True, "int"), type_ok(3, "float"), type_ok(None, "str|null")
    (False, True, True)
    """
    for t in type_.split("|"):
        if isinstance(value, bool) and t not in ("bool", "any"):
            continue
        if isinstance(value, _TYPES[t]):
            return True
    return False


def _split(path: str) -> list[str]:
    return path.replace("[]", ".[]").split(".")


def _parents(doc: object, steps: list[str]) -> Iterator[object]:
    """The containers that should hold the path's last key."""
    if not steps:
        yield doc
        return
    head, rest = steps[0], steps[1:]
    if head == "[]":
        if isinstance(doc, list):
            for item in doc:
                yield from _parents(item, rest)
    elif isinstance(doc, dict) and head in doc:
        yield from _parents(doc[head], rest)


def check_records(record: Record, docs: Iterable[object], where: str = "") -> list[str]:
    """What ``docs`` (a JSON document, or the lines of a JSON-lines file) get wrong
    against ``record``'s fields: one line a problem."""
    label = where or record.pattern
    problems: list[str] = []
    top = {_split(f.name)[0] for f in record.fields}
    for i, doc in enumerate(docs, 1):
        at = f"{label}: line {i}: " if record.format == "jsonl" else f"{label}: "
        if not isinstance(doc, dict):
            problems.append(f"{at}not a JSON object")
            continue
        for f in record.fields:
            steps = _split(f.name)
            for parent in _parents(doc, steps[:-1]):
                if not isinstance(parent, dict):
                    continue
                if steps[-1] not in parent:
                    if f.required:
                        problems.append(f"{at}{f.name} missing")
                elif not type_ok(parent[steps[-1]], f.type):
                    problems.append(f"{at}{f.name} is "
                                    f"{type(parent[steps[-1]]).__name__}, not {f.type}")
        if record.closed:
            problems += [f"{at}{k} is not described" for k in doc if k not in top]
        if len(problems) > 20:
            break
    return problems


def read_docs(path: Path, fmt: str) -> list[object]:
    """The JSON values of a record file (an empty file holds none)."""
    text = path.read_text()
    if not text.strip():
        return []
    if fmt == "jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return [json.loads(text)]


def _files(folder: Path, where: str) -> Iterator[tuple[Path, str]]:
    for path in sorted(folder.iterdir()):
        if where == "run" and path.name == layout.VARIANTS:
            continue
        yield path, where


def check_folder(root: Path) -> list[str]:
    """What a results folder gets wrong against :data:`RECORDS`: files nobody describes,
    described fields missing or of another type. Empty when all is well."""
    summary = json.loads((root / layout.SUMMARY).read_text())
    folders = [(root, "run")]
    for run in summary.get("runs", []):
        folders += [(d, "variant") for d in layout.run_dirs(run, root) if d.is_dir()]
    problems = []
    for folder, where in folders:
        for path, kind in _files(folder, where):
            key = describing(path.name, kind)
            rel = path.relative_to(root)
            if key is None:
                problems.append(f"{rel}: no entry in testbed.core.records describes it")
                continue
            rec = RECORDS[key]
            if rec.format in ("json", "jsonl"):
                try:
                    docs = read_docs(path, rec.format)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    problems.append(f"{rel}: not {rec.format}: {exc}")
                    continue
                problems += check_records(rec, docs, str(rel))
    return problems


# -- the reference page -----------------------------------------------------------------
WHERE = {"run": "The results folder", "variant": "A variant's folder",
         "lab": "A lab's folder (testbed up)"}

INTRO = """# Results reference

Generated from `testbed.core.records` when the docs are built: every file of a results
folder, what writes it, and the fields of each record with their JSON type and unit.
A test checks real results folders against this table, so a file or a field the code
writes is described here or the test fails. Times marked *s (Unix time)* are seconds
since the epoch (floats); the PFC agent's times count from its own start. `|null` means
the value may be `null`; a name like `runs[].agents.latency_ms.p99` is a key inside a
list's items. *JSON lines* files hold one JSON object a line.

```
OUT/summary.json, manifest.json, report.md, *.png
OUT/variants/NAME/            one variant (one seed)
OUT/variants/NAME/seedN/      one variant and seed, when the scenario has several seeds
```

To load these files into pandas, see [Analysing results](../analysis.md).
"""


def _cell(text: str) -> str:
    return text.replace("``", "`").replace("|", "\\|").replace("\n", " ")


def reference_page() -> str:
    """The results reference, as Markdown."""
    formats = {"jsonl": "JSON lines", "json": "JSON", "png": "PNG image", "log": "text log",
               "text": "text",
               "markdown": "Markdown", "pcap": "pcap", "folder": "folder"}
    lines = [INTRO]
    for where, title in WHERE.items():
        lines += [f"## {title}", ""]
        for rec in (r for r in RECORDS.values() if r.where == where):
            lines += [f"### `{rec.pattern}`", "",
                      f"{_cell(rec.meaning[0].upper() + rec.meaning[1:])}. "
                      f"{formats[rec.format]}, written by `{rec.writer}`.", ""]
            if rec.fields:
                lines += ["| field | type | unit | meaning |", "|---|---|---|---|"]
                lines += [f"| `{f.name}` | {_cell(f.type)} | {_cell(f.unit)} | "
                          f"{_cell(f.meaning)}{'' if f.required else ' (optional)'} |"
                          for f in rec.fields]
                lines.append("")
                if not rec.closed and rec.format in ("json", "jsonl"):
                    lines += ["Other keys may appear; those above are always there "
                              "(unless marked optional).", ""]
    return "\n".join(lines)
