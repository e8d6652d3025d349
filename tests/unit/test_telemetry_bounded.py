"""Telemetry stays bounded on large fabrics: written when a port changed, streamed back
whole, sampled within a budget; the summary never holds the samples."""

from __future__ import annotations

import json
import tracemalloc

from controllers.config import ControllerConfig
from controllers.telemetry import (
    PortCounters,
    PortInfo,
    Queue,
    TelemetryWriter,
    expand,
    make_sample,
    poll_interval_ms,
)
from testbed.host.files import read_jsonl
from testbed.reports.telemetry import port_samples, summarize


def _samples(t: float, busy: dict[int, int], ports: int = 8, switch: str = "l0"):
    """One reply's samples: ports 1..ports, those in ``busy`` with that backlog and
    counters that moved."""
    out = []
    for port in range(1, ports + 1):
        info = PortInfo(switch, 1, port, f"{switch}e{port}",
                        "leaf_uplink" if port > ports // 2 else "leaf_downlink", 20)
        sent = int(t * 1000) if port in busy else 0
        now = PortCounters(sent, 0, sent // 100, 0, t)
        prev = PortCounters(max(0, sent - 100), 0, 0, 0, t - 0.1) if port in busy else None
        out.append(make_sample(t, info, prev, now, Queue(busy.get(port, 0), 0)))
    return out


def _write(path, ticks: int, busy: dict[int, int], ports: int = 8) -> list[list]:
    writer = TelemetryWriter(str(path))
    written = []
    for i in range(ticks):
        samples = _samples(100 + i * 0.1, busy, ports)
        writer.write("l0", samples[0].t, samples)
        written.append(samples)
    writer.close()
    return written


def test_unchanged_ports_cost_one_short_line_and_come_back_whole(tmp_path):
    path = tmp_path / "telemetry.jsonl"
    written = _write(path, ticks=20, busy={7: 5000}, ports=8)
    lines = path.read_text().splitlines()
    # first tick: every port in full; then the busy port in full and one line for the rest
    assert len(lines) == 8 + 19 * 2
    same = [json.loads(x) for x in lines if '"same"' in x]
    assert len(same) == 19 and same[-1]["same"] == [1, 2, 3, 4, 5, 6, 8]
    # expanded, the file is every sample that was taken, in full
    back = list(port_samples(path))
    want = [json.loads(s.to_json()) for tick in written for s in tick]
    key = lambda s: (s["t"], s["port"])  # noqa: E731
    assert sorted(back, key=key) == sorted(want, key=key)


def test_a_port_that_changes_back_is_written_again(tmp_path):
    path = tmp_path / "telemetry.jsonl"
    writer = TelemetryWriter(str(path))
    for i, backlog in enumerate((0, 0, 3000, 0, 0)):
        samples = _samples(10 + i * 0.1, {}, ports=2)
        samples[0] = make_sample(samples[0].t, PortInfo("l0", 1, 1, "l0e1", "leaf_uplink", 20),
                                 None, PortCounters(0, 0, 0, 0, samples[0].t),
                                 Queue(backlog, 0))
        writer.write("l0", samples[0].t, samples)
    writer.close()
    backlog = [s["backlog_bytes"] for s in port_samples(path) if s["port"] == 1]
    assert backlog == [0, 0, 3000, 0, 0]
    full = [r for r in read_jsonl(path) if r.get("port") == 1]
    assert [r["backlog_bytes"] for r in full] == [0, 3000, 0]


def test_same_line_of_a_port_never_written_is_skipped():
    assert list(expand([{"t": 1.0, "switch": "s", "same": [4]}])) == []


def test_summary_of_the_compact_file_equals_the_full_one(tmp_path):
    """The report's numbers do not depend on how the samples were stored."""
    compact, full = tmp_path / "compact.jsonl", tmp_path / "full.jsonl"
    written = _write(compact, ticks=30, busy={2: 12_000, 6: 800}, ports=8)
    full.write_text("".join(s.to_json() + "\n" for tick in written for s in tick))
    a, b = summarize(compact), summarize(full)
    assert a == b
    assert a["samples"] == 30 and a["roles"]["leaf_uplink"]["ports"] == 4
    assert compact.stat().st_size < full.stat().st_size / 3


def test_summary_streams_a_large_file(tmp_path):
    """Memory of the summary grows with ports and sample times, not with samples: a
    9,600-sample file (240 ports, 40 ticks) is summarized holding far less than it."""
    path = tmp_path / "telemetry.jsonl"
    rows = []
    for i in range(40):
        for sw in range(20):
            for port in range(1, 13):
                rows.append(json.dumps({
                    "t": round(100 + i * 0.1, 4), "switch": f"s{sw}", "port": port,
                    "ifname": f"s{sw}e{port}", "role": "leaf_uplink" if port > 6 else
                    "leaf_downlink", "tx_bytes": i, "rx_bytes": 0, "tx_packets": i,
                    "tx_dropped": 0, "backlog_bytes": (i * port) % 9000, "qdisc_drops": 0,
                    "util": round(((i + port) % 10) / 10, 4)}))
    path.write_text("\n".join(rows) + "\n")
    size = path.stat().st_size
    tracemalloc.start()
    s = summarize(path)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert s["samples"] == 40 and s["roles"]["leaf_uplink"]["ports"] == 120
    assert s["uplink_imbalance"]["max"] == 0.9  # (i + port) % 10 wraps within 6 uplinks
    assert peak < size / 2, (peak, size)  # the samples as dicts would be 3x the file


def test_budget_stretches_the_interval_only_beyond_it():
    assert poll_interval_ms(100, 80, 2000) == 100  # every shipped scenario: unchanged
    assert poll_interval_ms(100, 1280, 2000) == 640  # 128 switches: 2,000 samples/s
    assert poll_interval_ms(100, 1280, 0) == 100  # no budget
    assert ControllerConfig.from_dict({}).telemetry_budget == 2000
    assert ControllerConfig.from_dict({"telemetry_budget": 0}).telemetry_budget == 0
