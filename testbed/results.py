"""Turn a variant's record files into its summary entry; write summary.json.

Every number comes from what the generators recorded (per-chain and per-iteration
JSON lines), never from wall-clock guesses in the runner.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

from traffic.stats import summary as latency_summary

#: per-iteration counters of ECN, DCQCN and spraying, summed over ranks and iterations
CONGESTION_KEYS = ("reordered_packets", "ce_received", "cnps_sent", "cnps_received")
EMPTY_LATENCY = {"p50": None, "p95": None, "p99": None, "max": None}
#: ``training`` of a run without training traffic (the summary's contract asks for it)
ZERO_TRAINING = {"bytes": 0, "goodput_mbps": 0.0, "iterations": 0,
                 "iteration_ms": {"p50": None, "p99": None}}


def read_jsonl(path: Path) -> Iterator[dict]:
    """Records of a JSON-lines file; a torn last line (a killed writer) is skipped."""
    if not path.exists():
        return
    with open(path) as f:
        for line in f:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


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


def write_text(path: Path, text: str, *, secret: bool = False) -> None:
    """Write ``path`` whole or not at all (a temporary file beside it, renamed over it);
    ``secret``: readable by its owner alone (mode 0600: key files)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if secret else 0o644)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json(path: Path, data: dict, *, secret: bool = False) -> None:
    write_text(path, json.dumps(data, indent=2) + "\n", secret=secret)
