"""Probes carry the time they were sent, so a stalled sender's late burst shows as late."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from testbed.faults.accounting import probe_outcome, probe_streams

REPO = Path(__file__).resolve().parents[2]


def _free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_stalled_senders_burst_is_stamped_late(tmp_path):
    out = tmp_path / "probe.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "traffic.probe", "--name", "a", "--bind", "127.0.0.1",
         "--peer", "a=127.0.0.1", "--rate", "100", "--duration", "1.5",
         "--port", str(_free_udp_port()), "--out", str(out)], cwd=REPO)
    # it writes its start line as it starts sending (Python's start-up alone took over
    # 0.6 s in an emulated lab VM): stall it 0.3 s into its sending
    deadline = time.monotonic() + 30
    while not (out.exists() and out.read_text().endswith("\n")) and time.monotonic() < deadline:
        time.sleep(0.02)
    time.sleep(0.3)
    proc.send_signal(signal.SIGSTOP)  # the sender stalls for 300 ms
    time.sleep(0.3)
    proc.send_signal(signal.SIGCONT)
    assert proc.wait(10) == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    start = records[0]
    late = [r["t"] - (start["t0"] + r["q"] / start["rate"]) for r in records if "q" in r]
    assert late and max(late) > 0.2  # the burst after the stall left ~0.3 s after its due time
    assert min(late) >= -0.001  # never stamped before it was due
    # and the accounting takes a delivered probe's stamp as its send time
    [stream] = probe_streams(records).values()
    q = max(range(len(late)), key=late.__getitem__)
    assert stream.send_time(q) > stream.t0 + q / stream.rate + 0.2


def test_repair_is_given_with_the_probe_resolution():
    from testbed.faults.accounting import ProbeStream

    s = ProbeStream(t0=0.0, rate=100, sent=1000, received=set(range(1000)) - {200, 201, 202})
    s.sent_at = {q: q / 100 for q in s.received}
    s.sent_at[203] = 2.0032  # the first probe through after the outage
    out = probe_outcome({("a", "b"): s}, 1.995, 10.0)  # 8.2 ms: known only to 10 ms
    assert out["repair_ms"] == 8.0 and out["repair_resolution_ms"] == 10.0
