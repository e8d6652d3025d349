"""Fault windows -> what they did: the ``faults`` entries of a run.

Pure accounting over what the generators, probes, controller and fault schedule wrote
(epoch timestamps everywhere, so processes compare). A fault's *window* runs from the
moment its action started to the start of the next fault (or the end of traffic).
Per fault, precisely:

``detect_ms``
    first sign, after the fault started, that some layer noticed it: a controller event
    (``port_status``, ``recomputed``, ``drain``, ``connected`` after a restart), or a
    host that moved traffic (a chain hop that skipped or retried a plane; a training
    iteration that ran on fewer channels). None when nothing noticed.
``repair_ms``
    from the constant-rate probes (sequence numbers, send times stamped when sent; a
    lost probe's from the schedule): a stream is
    *repaired* at the earliest moment T (the fault start, or the send time of the probe
    after a lost one; never before the end of its last outage of ``BURST`` or more
    consecutive lost probes) from which to the end of the window it loses at most
    ``CLEAN_LOSS`` (1 %) of its probes, over at least ``settle_s``: loss that stops,
    not loss that merely pauses (a 20 % lossy link has quiet stretches too). repair_ms
    is the latest T over all streams, minus the fault start; 0 when no stream lost more
    than ``CLEAN_LOSS`` in the window. Streams never repaired within the window are
    counted in ``unrepaired_streams``, and then repair_ms is None: the fabric did not
    repair it (the probes of a failed plane stay broken however well the hosts move
    their own traffic; see the chain and training keys for that). Probes only sample
    the path: the repair happened between the last lost probe and the first delivered
    one, so repair_ms (the latter, an upper bound) is known to one probe interval,
    ``repair_resolution_ms`` (10 ms at 100 probes/s), and is given in whole ms.
``lost_packets``
    probes sent in the window that never arrived (all streams).
``chains_failed`` / ``chains_delayed``
    chains in flight during the window (started before its end, ended after its start)
    and hurt in it (their first failed hop, else their slowest hop, began in the window:
    a restore's damage is the restore's) that failed (error or time-out) / completed
    slower than the pre-fault p99.
``added_p99_ms``
    p99 of those chains' latency minus the pre-fault p99 (of ``baseline_chains`` chains
    that completed before the first fault; at least ``MIN_BASELINE``); over
    ``window_chains`` completed chains.
``p99_recovery_ms``
    start of the first 1 s bin (of chain start times, from the fault on) of at least
    ``MIN_BIN`` chains whose p99 (a failed chain counts as infinitely slow) is within 10 %
    of the pre-fault p99, minus the fault start; ``p99_recovery_bin_chains`` chains were
    in that bin. With few chains a bin's p99 is nearly its maximum.

Every p99 here is the one of :func:`traffic.stats.percentiles` (linear interpolation
between closest ranks), like every latency summary of the testbed.
``training_recovery_ms``
    from the fault to the end of the last *hurt* iteration (one with a lost packet or a
    step time-out in a step that began in the window: a step hurt by the next fault,
    a restore, is that fault's) in flight during the window, over all ranks, provided
    each rank had a clean iteration after its last hurt one; 0 only when no iteration in
    the window was hurt; None when some rank's last iteration in the window was still
    hurt (training not back within the window). A clean iteration between hurt ones does not end the
    recovery: the training is back when it stops being hurt.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from traffic.stats import percentiles, summary

DETECT_EVENTS = ("port_status", "recomputed", "drain")
CLEAN_LOSS = 0.01
BURST = 3  # consecutive lost probes (30 ms at 100/s): an outage, never just congestion
BIN_S = 1.0
MIN_BIN = 5  # chains in a bin for its p99 to count (with 5, the p99 is almost the max)
P99_TOLERANCE = 1.10
MIN_BASELINE = 20
LATE_S = 0.6


@dataclass
class ProbeStream:
    """One probe stream (sender -> receiver): send schedule, arrived sequence numbers and
    the send times stamped in the arrived probes."""

    t0: float
    rate: float
    sent: int
    received: set[int] = field(default_factory=set)
    sent_at: dict[int, float] = field(default_factory=dict)

    def send_time(self, seq: int) -> float:
        """When the probe left: its stamp if it arrived, else its scheduled time."""
        stamp = self.sent_at.get(seq)
        return self.t0 + seq / self.rate if stamp is None else stamp

    @property
    def interval_ms(self) -> float:
        return 1000.0 / self.rate

    def seqs_between(self, start: float, end: float) -> range:
        first = max(0, math.ceil((start - self.t0) * self.rate))
        last = min(self.sent, math.ceil((end - self.t0) * self.rate))
        return range(first, max(first, last))


def probe_streams(lines: Iterable[dict]) -> dict[tuple[str, str], ProbeStream]:
    """Rebuild the streams from every probe's JSON lines (``traffic.probe`` format)."""
    starts, sent, arrivals = {}, {}, []
    for rec in lines:
        if "start" in rec:
            starts[rec["start"]] = rec
        elif "stop" in rec:
            sent[rec["stop"]] = rec["sent"]
        else:
            arrivals.append(rec)
    streams = {}
    for name, start in starts.items():
        for peer, count in sent.get(name, {}).items():
            streams[(name, peer)] = ProbeStream(start["t0"], start["rate"], count)
    for a in arrivals:
        stream = streams.get((a["s"], a["d"]))
        if stream is not None:
            stream.received.add(a["q"])
            if "t" in a:
                stream.sent_at[a["q"]] = a["t"]
    return streams


def probe_outcome(streams: dict[tuple[str, str], ProbeStream], start: float, end: float,
                  settle_s: float = 1.0) -> dict:
    """Lost probes and repair time of one window (see the module doc).

    >>> s = ProbeStream(t0=0.0, rate=100, sent=1000,
    ...                 received=set(range(1000)) - {210, 211, 212, 700})
    >>> probe_outcome({("a", "b"): s}, 2.0, 10.0)
    {'lost_packets': 4, 'repair_ms': 130.0, 'repair_resolution_ms': 10.0, \
'unrepaired_streams': 0, 'streams': 1}
    >>> lossy = ProbeStream(t0=0.0, rate=10, sent=100, received=set(range(0, 100, 2)))
    >>> probe_outcome({("a", "b"): lossy}, 2.0, 10.0)["unrepaired_streams"]
    1
    """
    lost = 0
    repairs, unrepaired = [], 0
    for stream in streams.values():
        seqs = stream.seqs_between(start, end)
        missing = [q for q in seqs if q not in stream.received]
        lost += len(missing)
        if not missing:
            continue
        t = _repaired_at(stream, seqs, missing, settle_s)
        if t is None:
            unrepaired += 1
        else:
            repairs.append(max(0.0, (t - start) * 1000))
    if unrepaired:
        repair = None
    else:
        repair = float(round(max(repairs))) if repairs else 0.0
    resolution = max((s.interval_ms for s in streams.values()), default=None)
    return {"lost_packets": lost, "repair_ms": repair,
            "repair_resolution_ms": round(resolution, 3) if resolution else None,
            "unrepaired_streams": unrepaired, "streams": len(streams)}


def _repaired_at(stream: ProbeStream, seqs: range, missing: list[int],
                 settle_s: float) -> float | None:
    """Send time from which the stream stays (nearly) loss-free to the window's end."""
    need = max(1, int(settle_s * stream.rate))
    candidates = [seqs.start] + [q + 1 for q in missing]
    skip = _after_last_burst(missing)
    for i in range(skip, len(candidates)):
        first = candidates[i]
        total = seqs.stop - first
        if total < need:
            return None
        if len(missing) - i <= CLEAN_LOSS * total:
            return stream.send_time(first) if i else stream.send_time(seqs.start)
    return None


def _after_last_burst(missing: list[int]) -> int:
    """Index into ``[start] + [q + 1 for q in missing]`` just after the last run of
    ``BURST`` or more consecutive lost probes (an outage, not congestion); 0 if none."""
    after, run = 0, 0
    for i, q in enumerate(missing):
        run = run + 1 if i and q == missing[i - 1] + 1 else 1
        if run >= BURST:
            after = i + 1
    return after


def baseline(chains: list[dict], before: float) -> dict | None:
    """Latency summary of the chains that completed before ``before`` (the first fault),
    with ``chains``: how many."""
    lat = [c["latency_ms"] for c in chains if c["ok"] and c["end"] < before]
    return {**summary(lat), "chains": len(lat)} if len(lat) >= MIN_BASELINE else None


def hurt_times(hops: Iterable[dict]) -> dict[tuple, float]:
    """(chain, template) -> when the chain was hurt: the start of its first failed hop
    (its time-out began then), else of its slowest hop.

    >>> hurt_times([{"chain": 1, "template": "t", "start": 5.0, "latency_ms": 3, "ok": True},
    ...             {"chain": 1, "template": "t", "start": 5.1, "latency_ms": 90, "ok": True},
    ...             {"chain": 2, "template": "t", "start": 6.0, "latency_ms": 1, "ok": True},
    ...             {"chain": 2, "template": "t", "start": 6.2, "latency_ms": 500, "ok": False}])
    {(1, 't'): 5.1, (2, 't'): 6.2}
    """
    worst: dict[tuple, dict] = {}
    for hop in hops:
        key = (hop.get("chain"), hop.get("template"))
        now = worst.get(key)
        rank = (not hop.get("ok", True), hop["latency_ms"] if hop.get("ok", True)
                else -hop["start"])
        if now is None or rank > now["rank"]:
            worst[key] = {"rank": rank, "start": hop["start"]}
    return {key: w["start"] for key, w in worst.items()}


def chain_outcome(chains: list[dict], start: float, end: float, base: dict | None,
                  hurt: dict[tuple, float] | None = None) -> dict:
    """Chains in flight during ``[start, end)``: failed, delayed, added p99, recovery.
    With ``hurt`` (:func:`hurt_times`), a chain in flight here counts (failed, delayed,
    in the added p99) only when it was hurt in this window: a chain that began in one
    fault's window and was slowed by the next fault's is the next one's.

    >>> base = {"p50": 10.0, "p95": 12.0, "p99": 20.0, "max": 25.0}
    >>> ch = [{"start": 5.0 + i / 10, "end": 5.05 + i / 10, "ok": True, "latency_ms": 10.0}
    ...       for i in range(40)]
    >>> ch[0].update(latency_ms=400.0, end=5.4); ch[1].update(ok=False, error="timeout")
    >>> r = chain_outcome(ch, 5.0, 9.0, base)
    >>> r["chains_failed"], r["chains_delayed"], r["p99_recovery_ms"]
    (1, 1, 1000.0)
    >>> ch[0]["chain"], ch[0]["template"] = 0, "t"  # its slow hop began at 9.2: not here
    >>> chain_outcome(ch, 5.0, 9.0, base, {(0, "t"): 9.2})["chains_delayed"]
    0
    """
    inflight = [c for c in chains if c["start"] < end and c["end"] > start]
    hurt = hurt or {}
    mine = [c for c in inflight
            if (t := hurt.get((c.get("chain"), c.get("template")))) is None or start <= t < end]
    failed = [c for c in mine if not c["ok"]]
    done = [c for c in mine if c["ok"]]
    out = {"chains_inflight": len(inflight), "chains_failed": len(failed),
           "chains_delayed": None, "added_p99_ms": None, "window_chains": len(done),
           "p99_recovery_ms": None, "p99_recovery_bin_chains": None,
           "errors": sorted({str(c.get("error")) for c in failed})}
    if base is None:
        return out
    out["chains_delayed"] = sum(1 for c in done if c["latency_ms"] > base["p99"])
    window = summary([c["latency_ms"] for c in done])
    if window:
        out["added_p99_ms"] = round(window["p99"] - base["p99"], 1)
    t = start
    while t < end:
        in_bin = [c for c in chains if t <= c["start"] < t + BIN_S]
        bin_lat = [c["latency_ms"] if c["ok"] else math.inf for c in in_bin]
        if len(bin_lat) >= MIN_BIN and p99(bin_lat) <= base["p99"] * P99_TOLERANCE:
            out["p99_recovery_ms"] = round((t - start) * 1000, 1)
            out["p99_recovery_bin_chains"] = len(bin_lat)
            break
        t += BIN_S
    return out


def p99(values: list[float]) -> float:
    """The p99 of :func:`traffic.stats.percentiles` (the testbed's one definition).

    >>> p99([10.0] * 99 + [1000.0]), p99([1.0, 2.0, 3.0, 4.0, 5.0])
    (19.9, 4.96)
    """
    return round(percentiles(values, [99])[0], 6)


def _hurt_in(record: dict, start: float, end: float) -> tuple[int, int]:
    """(packets lost, step time-outs) of an iteration that happened in ``[start, end)``:
    those of its steps that began there (``hurt_steps``); a record without them (older
    results) counts whole."""
    steps = record.get("hurt_steps")
    if steps is None:
        return record["packets_lost"], record["timeouts"]
    mine = [s for s in steps if start <= s[0] < end]
    return sum(s[1] for s in mine), sum(s[2] for s in mine)


def training_outcome(iterations: list[dict], start: float, end: float) -> dict | None:
    """Training across the window: lost packets, time-outs, recovery time. A loss or a
    time-out belongs to the window in which its step began (so the damage of the next
    fault, a restore, never counts against this one).

    >>> it = lambda s, hurt=(): {"rank": 0, "start": s, "end": s + 0.5, "packets_lost":
    ...     sum(h[1] for h in hurt), "timeouts": sum(h[2] for h in hurt),
    ...     "hurt_steps": [list(h) for h in hurt]}
    >>> ranks = [it(10.0, [(10.1, 3, 1)]), it(10.5), it(11.0, [(11.2, 5, 1)])]
    >>> training_outcome(ranks, 10.05, 11.1)  # the 11.2 step is the next fault's
    {'training_lost_packets': 3, 'training_timeouts': 1, 'training_recovery_ms': 450.0}
    >>> training_outcome(ranks, 11.1, 12.0)["training_recovery_ms"] is None
    True
    """
    if not iterations:
        return None
    hit = [r for r in iterations if r["start"] < end and r["end"] > start]
    counts = {id(r): _hurt_in(r, start, end) for r in hit}
    recovery: float | None = 0.0
    for rank in sorted({r.get("rank", 0) for r in hit}):
        mine = [r for r in hit if r.get("rank", 0) == rank]
        hurt = [r["end"] for r in mine if any(counts[id(r)])]
        if not hurt:
            continue
        if not any(r["end"] > max(hurt) for r in mine):  # still hurt at the window's end
            recovery = None
            break
        recovery = max(recovery, round((max(hurt) - start) * 1000, 1))
    return {
        "training_lost_packets": sum(c[0] for c in counts.values()),
        "training_timeouts": sum(c[1] for c in counts.values()),
        "training_recovery_ms": recovery,
    }


def detection(start: float, end: float, events: list[dict], hops: list[dict],
              iterations: list[dict], restart: bool) -> tuple[float | None, str | None]:
    """(detect_ms, what detected it) for a fault that started at ``start``."""
    names = DETECT_EVENTS + (("connected",) if restart else ())
    seen = [(e["t"], f"controller:{e['event']}") for e in events
            if e.get("event") in names and start <= e["t"] < end]
    seen += [(h["start"], "host:agents") for h in hops
             if start <= h["start"] < end and h.get("tried")
             and h["tried"] != [h.get("preferred", h["tried"][0])]]
    full = max((r.get("channels", 0) for r in iterations), default=0)
    seen += [(r["start"], "host:training") for r in iterations
             if start <= r["start"] < end and r.get("channels", full) < full]
    if not seen:
        return None, None
    t, who = min(seen)
    return round((t - start) * 1000, 1), who


def fault_entries(records: list[dict], *, end: float, chains: list[dict], hops: list[dict],
                  events: list[dict], streams: dict, iterations: list[dict]) -> list[dict]:
    """One ``faults`` entry per executed fault record (``FaultRecord.to_dict()``)."""
    end -= LATE_S  # the newest probes may not have been received when the probes stopped
    done = sorted((r for r in records if r.get("started")), key=lambda r: r["started"])
    base = baseline(chains, done[0]["started"]) if done else None
    hurt = hurt_times(hops)
    out = []
    for i, rec in enumerate(done):
        start = rec["started"]
        stop = done[i + 1]["started"] if i + 1 < len(done) else end
        detect_ms, detected_by = detection(start, stop, events, hops, iterations,
                                           rec["action"] == "controller_restart")
        entry = {"fault": rec["action"], "target": rec["target"], "at_s": rec["at_s"],
                 "ok": rec["ok"], "error": rec.get("error"), "started": round(start, 6),
                 "window_s": round(stop - start, 3), "lateness_ms": rec.get("lateness_ms"),
                 "detect_ms": detect_ms, "detected_by": detected_by}
        entry.update(probe_outcome(streams, start, stop))
        entry["baseline_chains"] = base["chains"] if base else 0
        entry.update(chain_outcome(chains, start, stop, base, hurt))
        entry.update(training_outcome(iterations, start, stop) or {})
        out.append(entry)
    return out
