"""Exact failover figures from probe records and routing events.

Probes are sent at ``t0 + seq / rate`` (see :mod:`traffic.probe`), so the probes
that should have been sent in a window are known; the ones missing are lost. For a
fault at time ``f`` with window ``[f, end)`` (until the next scheduled action):

* ``detect_ms``: first routing-table change seen in any namespace at or after ``f``;
* ``lost_packets``: probes sent in the window that never arrived, summed over pairs;
* ``restore_ms``: for every pair that lost probes, the send time of the first probe
  that arrived after its last lost one, minus ``f``; the maximum over pairs (0 when
  nothing was lost);
* ``reordered_packets``: arrivals whose sequence number is below one already seen;
* ``reachability_after``: fraction of pairs whose probes sent in the last
  ``tail_s`` of the window arrived (the state once routing settled).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

Pair = tuple[str, str]


@dataclass
class PairLog:
    """Arrivals of one (src, dst) stream, in arrival order."""

    t0: float
    rate: float
    arrivals: list[tuple[int, float, float]] = field(default_factory=list)  # seq, sent, recv
    sent: int | None = None

    def seq_at(self, t: float) -> int:
        """First sequence number scheduled at or after time ``t``."""
        return max(0, math.ceil((t - self.t0) * self.rate - 1e-3))

    def sent_at(self, seq: int) -> float:
        return self.t0 + seq / self.rate


def load(records: Iterable[dict]) -> dict[Pair, PairLog]:
    """Group the records of every probe process (any order of files) by pair."""
    starts: dict[str, dict] = {}
    stops: dict[str, dict] = {}
    arrivals: dict[Pair, list] = defaultdict(list)
    for rec in records:
        if "start" in rec:
            starts[rec["start"]] = rec
        elif "stop" in rec:
            stops[rec["stop"]] = rec
        else:
            arrivals[(rec["s"], rec["d"])].append((rec["q"], rec["t"], rec["r"]))
    pairs: dict[Pair, PairLog] = {}
    for src, start in starts.items():
        for dst in start["peers"]:
            log = PairLog(start["t0"], start["rate"], arrivals.get((src, dst), []))
            if src in stops:
                log.sent = stops[src]["sent"].get(dst)
            pairs[(src, dst)] = log
    return pairs


def window(log: PairLog, start: float, end: float) -> dict:
    """Loss, reordering and recovery of one pair for probes sent in ``[start, end)``."""
    lo, hi = log.seq_at(start), log.seq_at(end)
    if log.sent is not None:
        hi = min(hi, log.sent)
    got: dict[int, float] = {}  # arrived sequence numbers and when they were sent
    reordered = 0
    top = -1
    for seq, sent, _recv in log.arrivals:
        if lo <= seq < hi:
            if seq < top:
                reordered += 1
            top = max(top, seq)
            got[seq] = sent
    lost = sorted(set(range(lo, hi)) - set(got))
    restore_s = 0.0
    if lost:  # the first probe through after the last loss, when it was really sent
        after = [s for s in got if s > lost[-1]]
        restore_s = (got[min(after)] - start) if after else math.inf
    return {"expected": max(0, hi - lo), "received": len(got), "lost": len(lost),
            "reordered": reordered, "restore_s": restore_s,
            "first_lost_s": (log.sent_at(lost[0]) - start) if lost else None}


def reachable(log: PairLog, start: float, end: float) -> bool:
    """Whether any probe sent in ``[start, end)`` arrived."""
    lo, hi = log.seq_at(start), log.seq_at(end)
    return any(lo <= seq < hi for seq, _, _ in log.arrivals)


def fault_figures(pairs: dict[Pair, PairLog], fault_t: float, end_t: float,
                  route_events: Iterable[float] = (), tail_s: float = 1.0) -> dict:
    """The figures of one fault whose window is ``[fault_t, end_t)``.

    >>> log = PairLog(t0=0.0, rate=100.0, arrivals=[(q, q / 100, q / 100 + 0.001)
    ...       for q in range(300) if not 120 <= q < 150], sent=300)
    >>> f = fault_figures({("a", "b"): log}, 1.0, 3.0, route_events=[0.5, 1.05, 1.2])
    >>> f["detect_ms"], f["lost_packets"], f["restore_ms"], f["reachability_after"]
    (50.0, 30, 500.0, 1.0)
    """
    events = sorted(t for t in route_events if fault_t <= t < end_t)
    per_pair = {}
    for pair, log in pairs.items():
        per_pair[pair] = window(log, fault_t, end_t)
    lost = sum(w["lost"] for w in per_pair.values())
    restores = [w["restore_s"] for w in per_pair.values() if w["lost"]]
    restore = max(restores) if restores else 0.0
    reach = [reachable(log, max(fault_t, end_t - tail_s), end_t) for log in pairs.values()]
    return {
        "detect_ms": _ms(events[0] - fault_t) if events else None,
        "restore_ms": _ms(restore) if math.isfinite(restore) else None,
        "lost_packets": lost,
        "reordered_packets": sum(w["reordered"] for w in per_pair.values()),
        "affected_pairs": sorted(f"{a}>{b}" for (a, b), w in per_pair.items() if w["lost"]),
        "reachability_after": round(sum(reach) / len(reach), 4) if reach else None,
    }


def loss_timeline(pairs: dict[Pair, PairLog], start: float, end: float,
                  bin_s: float = 0.1) -> list[tuple[float, float]]:
    """(seconds since ``start``, lost fraction over all pairs) per bin of ``bin_s``."""
    n = max(1, math.ceil((end - start) / bin_s))
    expected = [0] * n
    received = [0] * n
    for log in pairs.values():
        lo, hi = log.seq_at(start), log.seq_at(end)
        if log.sent is not None:
            hi = min(hi, log.sent)
        for seq in range(lo, hi):
            expected[min(n - 1, int((log.sent_at(seq) - start) / bin_s))] += 1
        seen = set()
        for seq, _sent, _ in log.arrivals:
            if lo <= seq < hi and seq not in seen:
                seen.add(seq)  # binned by schedule, exactly as expected ones are
                received[min(n - 1, int((log.sent_at(seq) - start) / bin_s))] += 1
    return [(round(i * bin_s, 3), (1 - received[i] / expected[i]) if expected[i] else 0.0)
            for i in range(n)]


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 1)
