"""A training job's plan, read by every rank: the runner's config, how a chunk is cut
into packets, the cycles of its permutation, the rank's command line and summary.
The rank itself (sockets, steps, the end of a run) is :mod:`traffic.training`.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traffic import roce
from traffic.dcqcn import DcqcnParams
from traffic.patterns import sources
from traffic.stats import percentiles

EXIT_USAGE = 2
MAX_PAYLOAD = 9000 - 20 - 8 - 12 - 4


class UsageError(Exception):
    """Bad command line or config; the message names the option and the reason."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


@dataclass(frozen=True)
class Channel:
    """One NIC of a rank: interface name, IPv4 address, MAC (optional next-hop MAC)."""

    iface: str
    ip: str
    mac: str
    gw_mac: str | None = None


@dataclass(frozen=True)
class Config:
    """The runner's JSON config, validated."""

    bytes: int
    compute_ms: float
    rate_mbps: float
    step_timeout_ms: float
    payload: int
    ranks: list[list[Channel]]
    send_to: list[int] | None = None  # destination of each rank; None = ring
    ecn: bool = False
    cnp_interval_us: float = 50.0
    spray: bool = False
    spray_ports: int = 16
    qps: int = 1
    dcqcn: DcqcnParams = field(default_factory=DcqcnParams)
    multipath: bool = False


def load_config(path: str | Path) -> Config:
    """Read and validate a training config; raise UsageError naming what is wrong."""
    try:
        raw = json.loads(Path(path).read_text())
    except FileNotFoundError as exc:
        raise UsageError(f"argument --config: no such file: {path}") from exc
    except (OSError, ValueError) as exc:
        raise UsageError(f"argument --config: cannot read {path}: {exc}") from exc
    try:
        cfg = Config(
            bytes=int(raw["bytes"]),
            compute_ms=float(raw["compute_ms"]),
            rate_mbps=float(raw["rate_mbps"]),
            step_timeout_ms=float(raw["step_timeout_ms"]),
            payload=int(raw.get("payload", 1024)),
            multipath=bool(raw.get("multipath", False)),
            ranks=[
                [Channel(c["iface"], c["ip"], c["mac"], c.get("gw_mac")) for c in r["channels"]]
                for r in raw["ranks"]
            ],
            send_to=[int(x) for x in raw["send_to"]] if raw.get("send_to") else None,
            ecn=bool(raw.get("ecn", False)),
            cnp_interval_us=float(raw.get("cnp_interval_us", 50.0)),
            spray=bool(raw.get("spray", False)),
            spray_ports=int(raw.get("spray_ports", 16)),
            qps=int(raw.get("qps", 1)),
            dcqcn=DcqcnParams.from_dict(raw.get("dcqcn")),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(f"argument --config: missing or bad field {exc}") from exc
    checks = [
        (cfg.bytes > 0, "bytes must be > 0"),
        (cfg.compute_ms >= 0, "compute_ms must be >= 0"),
        (cfg.rate_mbps > 0, "rate_mbps must be > 0"),
        (cfg.step_timeout_ms > 0, "step_timeout_ms must be > 0"),
        (1 <= cfg.payload <= MAX_PAYLOAD, f"payload must be 1..{MAX_PAYLOAD}"),
        (len(cfg.ranks) >= 1, "ranks must not be empty"),
        (all(cfg.ranks), "every rank needs at least one channel"),
        (len({len(r) for r in cfg.ranks}) <= 1, "all ranks need the same number of channels"),
    ]
    if cfg.send_to is not None:
        checks.append((len(cfg.send_to) == len(cfg.ranks), "send_to needs one entry a rank"))
        try:
            sources(cfg.send_to)
        except ValueError:
            checks.append((False, f"send_to must be a permutation, got {cfg.send_to}"))
        checks.append((all(d != i for i, d in enumerate(cfg.send_to)),
                       "send_to must not send a rank to itself"))
    checks += [
        (cfg.cnp_interval_us >= 0, "cnp_interval_us must be >= 0"),
        (1 <= cfg.spray_ports <= 1024, "spray_ports must be 1..1024"),
        (1 <= cfg.qps <= 64, "qps must be 1..64"),
        (not (cfg.spray and cfg.qps > 1), "spray and qps > 1 exclude each other"),
        (0 < cfg.dcqcn.g <= 1, "dcqcn.g must be in (0, 1]"),
        (cfg.dcqcn.timer_us > 0 and cfg.dcqcn.alpha_timer_us > 0, "dcqcn timers must be > 0"),
        (cfg.dcqcn.byte_counter_kb > 0, "dcqcn.byte_counter_kb must be > 0"),
        (0 < cfg.dcqcn.min_rate_mbps <= cfg.rate_mbps, "dcqcn.min_rate_mbps must be "
         "in (0, rate_mbps]"),
    ]
    for ok, reason in checks:
        if not ok:
            raise UsageError(f"argument --config: {reason}")
    return cfg


def split_chunk(chunk: int, channels: int, payload: int) -> list[list[int]]:
    """Payload sizes of the packets each channel sends for one chunk.

    The chunk is split evenly (the first ``chunk % channels`` channels carry one
    byte more); each channel's share is cut into ``payload``-byte packets plus a
    shorter last one.
    """
    plan = []
    for k in range(channels):
        share = chunk // channels + (1 if k < chunk % channels else 0)
        full, rest = divmod(share, payload)
        plan.append([payload] * full + ([rest] if rest else []))
    return plan


def opcode_for(index: int, count: int) -> int:
    """RC SEND opcode of packet ``index`` of a ``count``-packet message."""
    if count == 1:
        return roce.SEND_ONLY
    if index == 0:
        return roce.SEND_FIRST
    return roce.SEND_LAST if index == count - 1 else roce.SEND_MIDDLE


def cycle(dest: list[int], rank: int) -> list[int]:
    """The ranks of ``rank``'s cycle of the permutation ``dest``, from ``rank`` on.

    >>> cycle([1, 2, 0, 4, 3], 0), cycle([1, 2, 0, 4, 3], 4)
    ([0, 1, 2], [4, 3])
    """
    members, r = [rank], dest[rank]
    while r != rank:
        members.append(r)
        r = dest[r]
    return members


@dataclass
class IterStats:
    """Counters of one iteration (one JSON line)."""

    bytes_sent: int = 0
    bytes_received: int = 0
    packets_sent: int = 0
    packets_received: int = 0
    packets_lost: int = 0
    timeouts: int = 0
    icrc_errors: int = 0
    stale_packets: int = 0
    foreign_packets: int = 0
    reordered_packets: int = 0
    duplicate_packets: int = 0
    ce_received: int = 0
    cnps_sent: int = 0
    cnps_received: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def totals(records: list[dict[str, Any]], **head: Any) -> dict[str, Any]:
    """A rank's summary: ``head`` (its rank, ranks, channels, bytes a whole iteration
    brings, send-buffer stalls), then the totals over the iterations written."""
    def total(key: str) -> int:
        return sum(r[key] for r in records)

    comm_s = sum(r["comm_ms"] for r in records) / 1000
    iter_ms = sorted(r["iteration_ms"] for r in records if r["complete"])
    return {
        **head,
        "iterations": len(records),
        "complete_iterations": len(iter_ms),
        "bytes_sent": total("bytes_sent"),
        "bytes_received": total("bytes_received"),
        "packets_sent": total("packets_sent"),
        "packets_received": total("packets_received"),
        "packets_lost": total("packets_lost"),
        "timeouts": total("timeouts"),
        "icrc_errors": total("icrc_errors"),
        "reordered_packets": total("reordered_packets"),
        "ce_received": total("ce_received"),
        "cnps_sent": total("cnps_sent"),
        "cnps_received": total("cnps_received"),
        "comm_s": round(comm_s, 6),
        "goodput_mbps": round(total("bytes_received") * 8 / comm_s / 1e6, 3)
        if comm_s > 0 else 0.0,
        "mean_iteration_ms": round(sum(iter_ms) / len(iter_ms), 3) if iter_ms else None,
        "median_iteration_ms": round(percentiles(iter_ms, [50])[0], 3) if iter_ms else None,
        "max_iteration_ms": iter_ms[-1] if iter_ms else None,
    }


def build_parser(description: str = "") -> argparse.ArgumentParser:
    """The rank's command line (``python -m traffic training``)."""
    p = _Parser(prog="python -m traffic training", description=description)
    p.add_argument("--rank", type=int, required=True, help="this rank's index in the config")
    p.add_argument("--config", required=True, help="JSON config written by the runner")
    p.add_argument("--out", required=True, help="JSON-lines file, one line per iteration")
    p.add_argument("--iterations", type=int, help="stop after this many iterations")
    p.add_argument("--duration", type=float, help="seconds after start to stop starting "
                   "new iterations")
    p.add_argument("--start-at", type=float, help="UNIX time at which iteration 0 starts")
    p.add_argument("--first-iteration", type=int, default=0, metavar="N",
                   help="number the iterations from N (a job restarted from a checkpoint "
                   "on a new rank list goes on where it stopped)")
    p.add_argument("--ready-file", help="created once the rank is ready to send (sockets "
                   "open, frames built)")
    p.add_argument("--start-file", help="wait until this file exists, then start at the "
                   "UNIX time it holds (the runner writes it once every rank is ready)")
    return p


START_FILE_TIMEOUT_S = 300.0


def await_start(path: Path, stopped: Callable[[], bool],
                timeout: float = START_FILE_TIMEOUT_S) -> float | None:
    """The UNIX start time written into ``path`` (polled every 5 ms); None if the rank is
    stopped first or nothing comes within ``timeout``.

    >>> import tempfile
    >>> f = Path(tempfile.mkdtemp()) / "start"
    >>> _ = f.write_text("1796400000.5")
    >>> await_start(f, lambda: False)
    1796400000.5
    >>> await_start(f.with_name("none"), lambda: True) is None
    True
    >>> import shutil; shutil.rmtree(f.parent)
    """
    deadline = time.monotonic() + timeout
    while not stopped() and time.monotonic() < deadline:
        try:
            return float(path.read_text())
        except (FileNotFoundError, ValueError):  # not there, or not written whole yet
            time.sleep(0.005)
    return None
