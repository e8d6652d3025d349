"""What each file of a results folder holds: its format, fields, types and units.

One table, :data:`RECORDS`, keyed by the name :mod:`testbed.core.layout` gives the file.
The docs build turns it into the results reference, and the tests check real results
folders against it (both :mod:`testbed.core.record_checks`); the fields that several
records share are :mod:`testbed.core.record_fields`.

Types are JSON's, in Python words: ``int``, ``float`` (an int is a float too), ``str``,
``bool``, ``list``, ``object``, ``any``; ``|null`` allows ``null``. A field's name is a path:
``runs[].agents.latency_ms.p99`` is the key ``p99`` of ``latency_ms`` of ``agents`` of
every item of the list ``runs``.

>>> rec = RECORDS["CHAINS"]
>>> rec.pattern, rec.format, field_of(rec, "latency_ms").unit
('chains.jsonl', 'jsonl', 'ms')
"""

from __future__ import annotations

import fnmatch

from testbed.core import layout
from testbed.core.record_fields import (
    CHAIN_FIELDS,
    CLASS_TELEMETRY_FIELDS,
    CONTROLLER_EVENT_FIELDS,
    EPOCH,
    FAULT_FIELDS,
    FIDELITY_FIELDS,
    FIT_FIELDS,
    HOP_FIELDS,
    ITERATION_FIELDS,
    PFC_EVENT_FIELDS,
    PROBE_FIELDS,
    RUN_FIELDS,
    TELEMETRY_FIELDS,
    F,
    Field,
    Record,
    _pcts,
    opt,
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
    "LAB_REQUEST": _rec(layout.LAB_REQUEST, "lab", "json", "testbed.lab.up",
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
