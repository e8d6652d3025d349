"""A results folder as pandas DataFrames, for analysis.

Each function takes a results folder (``results/NAME/TIMESTAMP`` or ``--out``) and
returns one DataFrame over all its variants and seeds, with ``variant`` and ``seed``
columns so several folders concatenate. Units are in the column names (``latency_ms``,
``backlog_bytes``, ``goodput_mbps``, ``one_way_ms``) and, for every column, in
``df.attrs["units"]``; a time named ``*_s`` alone is seconds since the epoch (Unix time).
``docs/reference/results.md`` (:mod:`testbed.core.records`) says what each record
means.

pandas is an optional extra: ``pip install '.[analysis]'``. ::

    from testbed import results
    r = results.load("results/latest")
    r.chains.groupby("variant").latency_ms.quantile(0.99)
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.core import layout
from testbed.errors import HostError
from testbed.host.files import read_jsonl

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Results", "chains", "classes", "events", "faults", "fidelity", "flows", "hops",
           "iterations", "load", "queues", "runs"]


def _pd():
    try:
        import pandas
    except ImportError as exc:
        raise HostError("testbed.results needs pandas: pip install '.[analysis]' "
                        "(or pip install pandas)") from exc
    return pandas


def _variants(folder: Path) -> list[tuple[str, int, Path, dict]]:
    """(variant, seed, its folder, its summary entry) of every run of a results folder."""
    summary = json.loads((folder / layout.SUMMARY).read_text())
    out = []
    for run in summary.get("runs", []):
        for entry in run.get("seeds") or [run]:
            vdir = folder / entry.get("dir", run.get("dir", f"{layout.VARIANTS}/{run['name']}"))
            out.append((run["name"], entry.get("seed", run.get("seed")), vdir, run))
    return out


def _frame(rows: list[dict], columns: dict[str, str]) -> pd.DataFrame:
    """A DataFrame of ``rows`` with exactly ``columns`` (name -> unit), in that order."""
    pd = _pd()
    df = pd.DataFrame(rows, columns=list(columns))
    df.attrs["units"] = dict(columns)
    return df


def _per_variant(folder: Path | str, make, columns: dict[str, str]) -> pd.DataFrame:
    rows: list[dict] = []
    for variant, seed, vdir, run in _variants(Path(folder)):
        for row in make(vdir, run):
            rows.append({"variant": variant, "seed": seed, **row})
    return _frame(rows, {"variant": "", "seed": "", **columns})


def _jsonl(path: Path) -> list[dict]:
    return list(read_jsonl(path)) if path.exists() else []


RUN_COLUMNS = {
    "run_id": "", "switches": "", "hosts": "", "links": "", "fabric_start_s": "s",
    "chains_started": "", "chains_completed": "", "chains_failed": "",
    "chain_p50_ms": "ms", "chain_p95_ms": "ms", "chain_p99_ms": "ms", "chain_max_ms": "ms",
    "training_bytes": "bytes", "training_goodput_mbps": "Mb/s", "training_iterations": "",
    "iteration_p50_ms": "ms", "iteration_p99_ms": "ms", "fidelity_ok": "",
    "rate_factor": "",
}


def runs(folder: Path | str) -> pd.DataFrame:
    """One row a variant and seed: the summary's numbers (``summary.json``);
    ``rate_factor``: every rate of the scenario times this (``--fit``; 1.0: as shipped),
    and ``df.attrs["fit"]`` what ``--fit`` decided (None without it)."""
    fit = json.loads((Path(folder) / layout.SUMMARY).read_text()).get("fit")
    factor = fit.get("factor", 1.0) if isinstance(fit, dict) else 1.0

    def make(vdir: Path, run: dict):
        fabric, agents = run.get("fabric", {}), run.get("agents", {})
        lat, training = agents.get("latency_ms") or {}, run.get("training") or {}
        it = training.get("iteration_ms") or {}
        yield {"run_id": run.get("run_id"), "switches": fabric.get("switches"),
               "hosts": fabric.get("hosts"), "links": fabric.get("links"),
               "fabric_start_s": fabric.get("start_s"),
               "chains_started": agents.get("chains_started"),
               "chains_completed": agents.get("chains_completed"),
               "chains_failed": agents.get("chains_failed"),
               **{f"chain_{q}_ms": lat.get(q) for q in ("p50", "p95", "p99", "max")},
               "training_bytes": training.get("bytes"),
               "training_goodput_mbps": training.get("goodput_mbps"),
               "training_iterations": training.get("iterations"),
               "iteration_p50_ms": it.get("p50"), "iteration_p99_ms": it.get("p99"),
               "fidelity_ok": (run.get("fidelity") or {}).get("ok"),
               "rate_factor": factor}
    df = _per_variant(folder, make, RUN_COLUMNS)
    df.attrs["fit"] = fit
    return df


CHAIN_COLUMNS = {"chain": "", "template": "", "start_s": "s (Unix time)",
                 "end_s": "s (Unix time)", "t_s": "s (since the variant's first chain)",
                 "steps": "", "hops_done": "", "ok": "", "error": "", "latency_ms": "ms",
                 "hop_sum_ms": "ms"}


def chains(folder: Path | str) -> pd.DataFrame:
    """One row an agent chain (``chains.jsonl``): end-to-end latency in ms."""
    def make(vdir: Path, run: dict):
        recs = _jsonl(vdir / layout.CHAINS)
        t0 = min((r["start"] for r in recs), default=0.0)
        for r in recs:
            yield {**r, "start_s": r["start"], "end_s": r["end"], "t_s": r["start"] - t0}
    return _per_variant(folder, make, CHAIN_COLUMNS)


HOP_COLUMNS = {"chain": "", "template": "", "hop": "", "service": "", "address": "",
               "plane": "", "start_s": "s (Unix time)", "latency_ms": "ms",
               "request_bytes": "bytes", "reply_bytes": "bytes", "service_us": "us",
               "ok": "", "error": "", "preferred_plane": "", "tried_planes": ""}


def hops(folder: Path | str) -> pd.DataFrame:
    """One row a hop of a chain (``hops.jsonl``): a request to a service and its reply."""
    def make(vdir: Path, run: dict):
        for r in _jsonl(vdir / layout.HOPS):
            yield {**r, "start_s": r["start"], "request_bytes": r["request"],
                   "reply_bytes": r["reply"], "preferred_plane": r.get("preferred"),
                   "tried_planes": r.get("tried")}
    return _per_variant(folder, make, HOP_COLUMNS)


ITERATION_COLUMNS = {
    "rank": "", "iteration": "", "start_s": "s (Unix time)", "end_s": "s (Unix time)",
    "iteration_ms": "ms", "comm_ms": "ms", "compute_ms": "ms", "send_ms": "ms",
    "bytes_sent": "bytes", "bytes_received": "bytes", "packets_sent": "packets",
    "packets_received": "packets", "packets_lost": "packets", "timeouts": "",
    "reordered_packets": "packets", "ce_received": "packets", "cnps_sent": "packets",
    "cnps_received": "packets", "complete": "", "goodput_mbps": "Mb/s",
}


def iterations(folder: Path | str) -> pd.DataFrame:
    """One row an iteration of a training rank (``training-rank*.jsonl``); goodput is
    the bytes the rank received over its iteration time."""
    def make(vdir: Path, run: dict):
        for path in sorted(vdir.glob(layout.RANK_GLOB)):
            for r in read_jsonl(path):
                ms = r["iteration_ms"]
                yield {**r, "start_s": r["start"], "end_s": r["end"],
                       "goodput_mbps": r["bytes_received"] * 8 / ms / 1e3 if ms else None}
    return _per_variant(folder, make, ITERATION_COLUMNS)


QUEUE_COLUMNS = {"t_s": "s (Unix time)", "switch": "", "port": "", "ifname": "", "role": "",
                 "tx_bytes": "bytes (cumulative)", "rx_bytes": "bytes (cumulative)",
                 "tx_packets": "packets (cumulative)",
                 "tx_dropped_packets": "packets (cumulative)", "backlog_bytes": "bytes",
                 "qdisc_drops_packets": "packets (cumulative)", "util": "fraction (0-1)"}
_PORT_KEYS = ("port", "ifname", "role", "tx_bytes", "rx_bytes", "tx_packets", "tx_dropped",
              "backlog_bytes", "qdisc_drops", "util")


def queues(folder: Path | str) -> pd.DataFrame:
    """One row a switch port's sample (``telemetry.jsonl``, sampled by the controller):
    its egress queue and counters. A port unchanged since its last sample (a ``same``
    line) repeats its last values at the new time."""
    def make(vdir: Path, run: dict):
        last: dict[tuple[str, int], dict] = {}
        for r in _jsonl(vdir / layout.TELEMETRY):
            if "same" in r:
                for port in r["same"]:
                    prev = last.get((r["switch"], port))
                    if prev:
                        yield {**prev, "t_s": r["t"]}
                continue
            if "port" not in r:
                continue
            row = {"t_s": r["t"], "switch": r["switch"],
                   **{k: r.get(k) for k in _PORT_KEYS},
                   "tx_dropped_packets": r.get("tx_dropped"),
                   "qdisc_drops_packets": r.get("qdisc_drops")}
            last[(r["switch"], r["port"])] = row
            yield row
    return _per_variant(folder, make, QUEUE_COLUMNS)


CLASS_COLUMNS = {"t_s": "s (since the PFC agent started)", "port": "", "traffic_class": "",
                 "sent_bytes": "bytes (cumulative)", "drops_packets": "packets (cumulative)",
                 "backlog_bytes": "bytes"}


def classes(folder: Path | str) -> pd.DataFrame:
    """One row a port, traffic class and sample (``class-telemetry.jsonl``, 10 a second):
    what each class's queue sent, dropped and held."""
    def make(vdir: Path, run: dict):
        names: list[str] = []
        for r in _jsonl(vdir / layout.CLASS_TELEMETRY):
            if "classes" in r:
                names = r["classes"]
                continue
            for port, per_class in r["ports"].items():
                for name, counters in zip(names, per_class, strict=False):
                    if counters is not None:
                        yield {"t_s": r["t"], "port": port, "traffic_class": name,
                               "sent_bytes": counters[0], "drops_packets": counters[1],
                               "backlog_bytes": counters[2]}
    return _per_variant(folder, make, CLASS_COLUMNS)


FAULT_COLUMNS = {"action": "", "target": "", "at_s": "s (after traffic start)",
                 "planned_s": "s (Unix time)", "started_s": "s (Unix time)",
                 "done_s": "s (Unix time)", "ok": "", "error": "", "lateness_ms": "ms",
                 "detect_ms": "ms", "repair_ms": "ms", "chains_failed": "",
                 "chains_delayed": "", "added_p99_ms": "ms", "p99_recovery_ms": "ms",
                 "lost_packets": "packets", "training_lost_packets": "packets",
                 "training_timeouts": "", "training_recovery_ms": "ms"}
_ANALYSIS = ("detect_ms", "repair_ms", "chains_failed", "chains_delayed", "added_p99_ms",
             "p99_recovery_ms", "lost_packets", "training_lost_packets",
             "training_timeouts", "training_recovery_ms")


def faults(folder: Path | str) -> pd.DataFrame:
    """One row a fault as it ran (``faults.json``), with what it cost: detection, repair,
    chains and training (the summary's ``faults`` entry of its variant)."""
    def make(vdir: Path, run: dict):
        path = vdir / layout.FAULTS
        if not path.exists():
            return
        cost = {(e.get("fault"), e.get("target"), e.get("at_s")): e
                for e in run.get("faults") or []}
        for r in json.loads(path.read_text()).get("records", []):
            e = cost.get((r["action"], r["target"], r["at_s"]), {})
            yield {"action": r["action"], "target": r["target"], "at_s": r["at_s"],
                   "planned_s": r["planned"], "started_s": r["started"],
                   "done_s": r["done"], "ok": r["ok"], "error": r["error"],
                   "lateness_ms": r.get("lateness_ms"), **{k: e.get(k) for k in _ANALYSIS}}
    return _per_variant(folder, make, FAULT_COLUMNS)


EVENT_COLUMNS = {"source": "", "t_s": "s (Unix time; controller events)",
                 "agent_t_s": "s (since the PFC agent started; PFC events)", "event": "",
                 "switch": "", "port": "", "priority": "", "detail": ""}
_PFC_KINDS = ("state", "watchdog", "storm", "xoff", "xon", "failed")


def events(folder: Path | str) -> pd.DataFrame:
    """One row an event during a fault's life and around it: the controller's
    (``controller-events.jsonl``: connections, installs, moves, port status) and PFC's
    (``pfc-events.jsonl``: pauses, XOFF/XON, the watchdog, storms). ``detail`` holds the
    event's other keys."""
    def make(vdir: Path, run: dict):
        for r in _jsonl(vdir / layout.CONTROLLER_EVENTS):
            rest = {k: v for k, v in r.items() if k not in ("t", "event", "name")}
            yield {"source": "controller", "t_s": r["t"], "event": r["event"],
                   "switch": r.get("name"), "detail": rest}
        for r in _jsonl(vdir / layout.PFC_EVENTS):
            kind = next((k for k in _PFC_KINDS if k in r), "pfc")
            value = r[kind] if kind in r else None
            event = f"{kind}:{value}" if isinstance(value, str) else kind
            rest = {k: v for k, v in r.items()
                    if k not in ("t", "switch", "port", "priority", kind)}
            if not isinstance(value, str):
                rest[kind] = value
            yield {"source": "pfc", "agent_t_s": r["t"], "event": event,
                   "switch": r.get("switch"), "port": r.get("port"),
                   "priority": r.get("priority"), "detail": rest}
    return _per_variant(folder, make, EVENT_COLUMNS)


FIDELITY_COLUMNS = {"t_s": "s (Unix time)", "interval_s": "s", "measuring": "",
                    "host_idle": "fraction", "ovs_cores": "cores",
                    "ovs_thread_cores": "cores", "helpers_cores": "cores",
                    "runner_cores": "cores", "other_cores": "cores",
                    "saturated_links": "", "delivered_min": "fraction"}


def fidelity(folder: Path | str) -> pd.DataFrame:
    """One row a fidelity sample (``fidelity.jsonl``, about one a second): did the host
    keep up (idle CPU, the switch process, helpers; saturated links' delivery)."""
    def make(vdir: Path, run: dict):
        for r in _jsonl(vdir / layout.FIDELITY):
            delivered = [s["delivered"] for s in r.get("saturated", []) if "delivered" in s]
            yield {**r, "t_s": r["t"], "saturated_links": len(r.get("saturated", [])),
                   "delivered_min": min(delivered, default=None)}
    return _per_variant(folder, make, FIDELITY_COLUMNS)


FLOW_COLUMNS = {"src": "", "dst": "", "seq": "", "sent_s": "s (Unix time)",
                "received_s": "s (Unix time)", "one_way_ms": "ms"}


def flows(folder: Path | str) -> pd.DataFrame:
    """One row a probe packet received (``probe-*.jsonl``): the UDP probe flows between
    hosts that fault runs send, with their one-way delay (host clocks are one clock: the
    hosts are namespaces of one machine). Lost packets have no row; ``sent`` in each
    probe's stop line counts what was sent."""
    def make(vdir: Path, run: dict):
        for path in sorted(vdir.glob(layout.PROBE_GLOB)):
            for r in read_jsonl(path):
                if "s" in r:
                    yield {"src": r["s"], "dst": r["d"], "seq": r["q"], "sent_s": r["t"],
                           "received_s": r["r"], "one_way_ms": (r["r"] - r["t"]) * 1000}
    return _per_variant(folder, make, FLOW_COLUMNS)


@dataclass(frozen=True)
class Results:
    """Every table of one results folder (see each function for its rows)."""

    folder: Path
    runs: Any
    chains: Any
    hops: Any
    iterations: Any
    queues: Any
    classes: Any
    faults: Any
    events: Any
    fidelity: Any
    flows: Any


TABLES = ("runs", "chains", "hops", "iterations", "queues", "classes", "faults", "events",
          "fidelity", "flows")


def load(folder: Path | str) -> Results:
    """Every table of a results folder at once."""
    folder = Path(folder)
    if not (folder / layout.SUMMARY).exists():
        raise HostError(f"{folder}: no {layout.SUMMARY}: not a results folder")
    loaders = globals()
    return Results(folder, **{name: loaders[name](folder) for name in TABLES})
