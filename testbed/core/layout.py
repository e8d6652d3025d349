"""The results folder of a run: one owner of its layout and of every record file's name.

::

    OUT/summary.json, manifest.json, report.md, *.png
    OUT/variants/NAME/            one variant (one seed)
    OUT/variants/NAME/seedN/      one variant and seed, when the scenario has several seeds

The runner asks :meth:`Layout.variant` where a variant's records go and writes the
relative folder into its ``runs`` entry (``dir``); reports, fault analysis and
re-analysis find the folders again with :func:`run_dirs`, from summary.json alone, so a
results folder can be re-rendered anywhere.

>>> lay = Layout(Path("/r"), seeds=(1, 2))
>>> lay.relative("ecmp", 2), lay.variant("ecmp", 2)
('variants/ecmp/seed2', PosixPath('/r/variants/ecmp/seed2'))
>>> Layout(Path("/r")).relative("ecmp", 7)
'variants/ecmp'
>>> [str(p) for p in run_dirs({"name": "a", "seeds": [{"dir": "variants/a/seed1"},
...                                                  {"dir": "variants/a/seed2"}]}, Path("/r"))]
['/r/variants/a/seed1', '/r/variants/a/seed2']
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

VARIANTS = "variants"
SUMMARY = "summary.json"
MANIFEST = "manifest.json"
REPORT = "report.md"
DIGEST = "digest.json"  # the SHA-256 of every other file, written last (testbed/core/digest.py)

# record files inside a variant folder (written by generators, the controller, the runner)
CHAINS = "chains.jsonl"
HOPS = "hops.jsonl"
AGENT_PLAN = "agent-plan.json"
#: where services are now, for the driver on SIGHUP (a node replaced during the run)
SERVICE_DIRECTORY = "services.json"
#: node health and replacements during the run (testbed.operations)
REPLACEMENT = "replacement.json"
DRIVER_SUMMARY = "driver-summary.json"
TELEMETRY = "telemetry.jsonl"
CONTROLLER_EVENTS = "controller-events.jsonl"
CONTROLLER_LOG = "controller.log"
CONTROLLER_CONFIG = "controller.json"
SPEC = "spec.json"
#: where each switch and host ran when the fabric was spread over several machines
PLACEMENT = "placement.json"
FAULTS = "faults.json"
TRAINING_CONFIG = "training.json"
RANK_GLOB = "training-rank*.jsonl"
PROBE_GLOB = "probe-*.jsonl"
PROBE_LOG_GLOB = "probe-*.log"
RANK_LOG_GLOB = "training-rank*.log"
SERVICE_STATS_GLOB = "service-*.json"  # an agent service's counters (service-NAME.json)
SERVICE_LOG_GLOB = "service-*.log"
WORKLOAD_LOG_GLOB = "workload-*.log"  # a listed workload's output (workload-I-NAME.log)
WORKLOAD_OUT_GLOB = "workload-*.out"  # a command workload's standard output
WORKLOAD_JSON_GLOB = "workload-*.json"  # an iperf3 or replay workload's JSON report
REPLICATION_GLOB = "replication-*.json"  # the backbone's replication flows (iperf3)
BACKBONE_PROBES_GLOB = "probes-*.jsonl"  # the backbone's probes, one file a region
READ_LOAD_GLOB = "load-*.json"  # the storage scenario's parallel readers (load-N-I.json)
MACSEC_LINK = "link"  # the protected link's configuration and its helpers' files
ACCEPTANCE = "acceptance"  # a lab's acceptance checks: their collectives' records
CAPTURE_GLOB = "capture-*.pcap"  # a scenario's captures, one a port
HELPER_LOG_GLOB = "*.log"  # any other helper process's output, named after the helper
FIDELITY = "fidelity.jsonl"  # the fidelity monitor's samples (testbed/core/fidelity.py)
PFC = "pfc.json"  # per-class counters and PFC (testbed/fabric/pfc.py)
PFC_EVENTS = "pfc-events.jsonl"
PFC_STORMS = "pfc-storm"  # a file per host NIC that storms PAUSE
CLASS_TELEMETRY = "class-telemetry.jsonl"
QOS_PLOT = "qos.png"
PFC_CONFIG = "pfc-config.json"  # the PFC agent's configuration, as the run gave it
PFC_LOG = "pfc.log"
TELEMETRY_PLOT = "telemetry.png"
MACSEC_KEYS = "macsec-keys.json"  # the SAKs of a protected run, mode 0600
DRIVER_LOG = "driver.log"  # the agent chains' driver
WIRE_PCAP = "wire.pcap"  # frames of one protected wire, as an eavesdropper sees them
TCPDUMP_LOG = "tcpdump.log"
LOSS_TIMELINE = "loss_timeline.json"  # the backbone probes' loss in 100 ms bins
PROBE_LOSS_PLOT = "probe_loss.png"
BULK = "bulk.json"  # MACsec's bulk iperf3 flow (its JSON report)
ATTACK = "attack.json"  # MACsec's injected and replayed frames
STORE_LOG = "store.log"  # the storage cluster's object store
LOAD_LOG = "load.log"  # the storage scenario's loader
READS = "reads.jsonl"  # the storage scenario's object reads (the retriever's)
CHECKPOINT_WRITES = "checkpoint_writes.jsonl"  # cross-region checkpoints: each write
CHECKPOINT_ARRIVALS = "checkpoint_arrivals.jsonl"  # each file seen in the second region
CHECKPOINT_TIMELINE = "checkpoint_timeline.json"  # lag and data in flight over time
FILER_SYNC_LOG = "filer-sync.log"  # the asynchronous replication between the regions
SWITCH_PROCESSES_LOG = "switch-processes.log"  # the lab's own ovs-vswitchd instances
# a lab's folder (testbed up)
LAB_REQUEST = "lab-request.json"  # what testbed up asked its supervisor for
SUPERVISOR_LOG = "supervisor.log"
LAB_FAULTS = "lab-faults.jsonl"  # faults applied by hand (testbed fault), as applied
#: the fidelity monitor's samples while ``testbed check LAB --lab NAME`` ran on the lab
LIVE_CHECK_FIDELITY = "live-check-fidelity.jsonl"
MONITOR_LOG = "monitor.log"  # the lab monitor: metrics and the live dashboard
MONITOR_STATUS = "monitor-status.jsonl"  # where it listens or why not (in the run folder)
MONITOR_BACKBONE = "monitor-backbone.json"  # a backbone lab described for its monitor
PROMETHEUS_LOG = "prometheus.log"  # the lab's own Prometheus (testbed up --monitor)
PROMETHEUS_SNAPSHOT = "prometheus-snapshot"  # its samples, kept when the lab went down
GRAFANA = "grafana"  # Grafana provisioning for that Prometheus (testbed.monitor.grafana)
# plots of the results folder
CHAIN_PLOT = "chain_latency.png"
TRAINING_PLOT = "training_iterations.png"
GOODPUT_PLOT = "goodput.png"
BISECTION_PLOT = "bisection.png"
DCQCN_PLOT = "dcqcn_rate.png"
CHECKPOINT_LAG_PLOT = "checkpoint_lag.png"
TIMELINE_PLOT_GLOB = "timeline-*.png"  # a faulted variant's timeline (timeline-NAME.png)


def rank_file(rank: int) -> str:
    """Per-iteration records of one training rank."""
    return f"training-rank{rank}.jsonl"


def rank_log(rank: int) -> str:
    """One training rank's log (:data:`RANK_LOG_GLOB`)."""
    return f"training-rank{rank}.log"


def service_stats(name: str) -> str:
    """An agent service's counters (:data:`SERVICE_STATS_GLOB`)."""
    return f"service-{name}.json"


def service_log(name: str) -> str:
    """An agent service's log (:data:`SERVICE_LOG_GLOB`)."""
    return f"service-{name}.log"


def probe_file(name: str) -> str:
    """A fault run's probe records (:data:`PROBE_GLOB`)."""
    return f"probe-{name}.jsonl"


def probe_log(name: str) -> str:
    """A probe's log (:data:`PROBE_LOG_GLOB`)."""
    return f"probe-{name}.log"


def timeline_plot(title: str) -> str:
    """A faulted variant's timeline (:data:`TIMELINE_PLOT_GLOB`)."""
    return f"timeline-{title.replace(' ', '-')}.png"


@dataclass(frozen=True)
class Layout:
    """Where a run's records go: ``root`` and the seeds the scenario runs."""

    root: Path
    seeds: Sequence[int] = ()

    def relative(self, name: str, seed: int | None = None) -> str:
        """A variant's folder relative to the root (a seed subfolder with several seeds)."""
        folder = f"{VARIANTS}/{name}"
        if len(self.seeds) > 1 and seed is not None:
            folder += f"/seed{seed}"
        return folder

    def variant(self, name: str, seed: int | None = None) -> Path:
        return self.root / self.relative(name, seed)


def run_dirs(run: dict, root: Path) -> list[Path]:
    """Every folder of a ``runs`` entry: one per seed (its ``seeds`` entries), else its own."""
    entries = run.get("seeds") or [run]
    return [root / e.get("dir", f"{VARIANTS}/{run['name']}") for e in entries]


def run_dir(run: dict, root: Path) -> Path:
    """The first folder of a ``runs`` entry (with several seeds: the first seed's)."""
    return root / run.get("dir", f"{VARIANTS}/{run['name']}")
