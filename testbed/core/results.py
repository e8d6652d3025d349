"""Turn a variant's record files into its summary entry; write summary.json.

Every number comes from what the generators recorded (per-chain and per-iteration
JSON lines), never from wall-clock guesses in the runner.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from testbed.host.files import read_jsonl
from traffic.stats import summary as latency_summary

#: per-iteration counters of ECN, DCQCN and spraying, summed over ranks and iterations
CONGESTION_KEYS = ("reordered_packets", "ce_received", "cnps_sent", "cnps_received")
EMPTY_LATENCY = {"p50": None, "p95": None, "p99": None, "max": None}
#: ``training`` of a run without training traffic (the summary's contract asks for it)
ZERO_TRAINING = {"bytes": 0, "goodput_mbps": 0.0, "iterations": 0,
                 "iteration_ms": {"p50": None, "p99": None}}


def agents_entry(chains_file: Path) -> dict:
    """``agents`` of a run: chain counts and end-to-end latency percentiles (ms)."""
    chains = list(read_jsonl(chains_file))
    done = [c["latency_ms"] for c in chains if c.get("ok")]
    hop_sums = [c["hop_sum_ms"] for c in chains if c.get("ok")]
    return {
        "chains_started": len(chains),
        "chains_completed": len(done),
        "chains_failed": len(chains) - len(done),
        "latency_ms": latency_summary(done) or dict(EMPTY_LATENCY),
        "hop_sum_ms": latency_summary(hop_sums) or dict(EMPTY_LATENCY),
    }


def training_entry(rank_files: list[Path]) -> dict:
    """``training`` of a run: bytes delivered, aggregate goodput, iteration times.

    An iteration lasts from the first rank's start to the last rank's end; goodput is
    all bytes received by all ranks over the time from the first start to the last end.
    """
    per_iter: dict[int, list[dict]] = defaultdict(list)
    for path in rank_files:
        for rec in read_jsonl(path):
            per_iter[rec["iteration"]].append(rec)
    complete = {i: recs for i, recs in per_iter.items() if len(recs) == len(rank_files)}
    records = [r for recs in per_iter.values() for r in recs]
    if not records:
        return {"bytes": 0, "goodput_mbps": 0.0, "iterations": 0,
                "iteration_ms": {"p50": None, "p99": None}, "packets_lost": 0,
                "packets_late": 0, "timeouts": 0,
                **dict.fromkeys(CONGESTION_KEYS, 0)}
    total_bytes = sum(r["bytes_received"] for r in records)
    span = max(r["end"] for r in records) - min(r["start"] for r in records)
    iteration_ms = [
        (max(r["end"] for r in recs) - min(r["start"] for r in recs)) * 1000
        for recs in complete.values()
    ]
    stats = latency_summary(iteration_ms, qs=(50, 99)) if iteration_ms else None
    return {
        "bytes": total_bytes,
        "goodput_mbps": round(total_bytes * 8 / span / 1e6, 3) if span > 0 else 0.0,
        "iterations": len(complete),
        "iteration_ms": {"p50": stats["p50"], "p99": stats["p99"]} if stats
        else {"p50": None, "p99": None},
        "packets_lost": sum(r.get("packets_lost", 0) for r in records),
        # arrived after their step's time-out had counted them lost (or twice)
        "packets_late": sum(r.get("stale_packets", 0) for r in records),
        "timeouts": sum(r.get("timeouts", 0) for r in records),
        **{key: sum(r.get(key, 0) for r in records) for key in CONGESTION_KEYS},
    }
