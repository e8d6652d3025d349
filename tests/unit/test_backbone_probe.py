"""Probe payloads and the failover analysis on synthetic records."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from testbed.backbone.analysis import PairLog, fault_figures, load, loss_timeline, window
from traffic.probe import decode, encode


def _records(rate=100.0, n=500, drop=range(0), swap=None, t0=1000.0):
    recs = [{"start": "a", "t0": t0, "rate": rate, "peers": ["b"]},
            {"start": "b", "t0": t0, "rate": rate, "peers": ["a"]}]
    seqs = [q for q in range(n) if q not in drop]
    if swap:
        i = seqs.index(swap)
        seqs[i], seqs[i + 1] = seqs[i + 1], seqs[i]
    for q in seqs:
        recs.append({"s": "a", "d": "b", "q": q, "t": t0 + q / rate, "r": t0 + q / rate + .01})
        recs.append({"s": "b", "d": "a", "q": q, "t": t0 + q / rate, "r": t0 + q / rate + .01})
    recs += [{"stop": "a", "sent": {"b": n}}, {"stop": "b", "sent": {"a": n}}]
    return recs


def test_payload_round_trip():
    assert decode(encode(123456, 1700000000.25, "ap-southeast")) == (
        123456, 1700000000.25, "ap-southeast")
    assert decode(b"junk") is None


def test_no_loss_gives_zero():
    pairs = load(_records())
    f = fault_figures(pairs, 1001.0, 1004.0, route_events=[1001.002])
    assert f["lost_packets"] == 0 and f["restore_ms"] == 0.0
    assert f["detect_ms"] == 2.0 and f["reachability_after"] == 1.0


def test_loss_restore_and_reorder():
    pairs = load(_records(drop=range(150, 180), swap=300))
    f = fault_figures(pairs, 1001.45, 1004.0)
    assert f["lost_packets"] == 60  # 30 on each direction
    assert f["restore_ms"] == 350.0  # seq 180 sent at 1001.80
    assert f["reordered_packets"] == 2
    assert f["affected_pairs"] == ["a>b", "b>a"]
    assert f["detect_ms"] is None


def test_unreachable_at_end():
    pairs = load(_records(drop=range(200, 500)))
    f = fault_figures(pairs, 1001.9, 1005.0)
    assert f["reachability_after"] == 0.0
    assert f["restore_ms"] is None and f["lost_packets"] == 600


def test_trailing_loss_counted_with_sent_count():
    log = PairLog(0.0, 10.0, [(q, q / 10, q / 10) for q in range(5)], sent=10)
    assert window(log, 0.0, 100.0)["lost"] == 5


def test_loss_timeline():
    pairs = load(_records(drop=range(100, 150)))
    tl = loss_timeline(pairs, 1000.0, 1005.0, bin_s=0.5)
    assert tl[2] == (1.0, 1.0) and tl[0] == (0.0, 0.0)


def test_probe_over_loopback(tmp_path):
    """Two probes send to each other for 4 s; the window starts once both listen (each
    binds, then starts its clock: a slow machine may start one a second or more after
    the other) and takes 0.8 s of a's probes to b: 80 or 81 expected, at most one lost."""
    out_a, out_b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    base = [sys.executable, "-m", "traffic.probe", "--rate", "100", "--duration", "4",
            "--port", "47999"]
    pa = subprocess.Popen(base + ["--name", "a", "--bind", "127.0.0.1", "--peer",
                                  "b=127.0.0.2", "--out", str(out_a)])
    pb = subprocess.Popen(base + ["--name", "b", "--bind", "127.0.0.2", "--peer",
                                  "a=127.0.0.1", "--out", str(out_b)])
    assert pa.wait(30) == 0 and pb.wait(30) == 0
    recs = [json.loads(line) for p in (out_a, out_b) for line in p.read_text().splitlines()]
    pairs = load(recs)
    ab, ba = pairs[("a", "b")], pairs[("b", "a")]
    start = max(ab.t0, ba.t0) + 0.1
    assert start + 0.8 < ab.t0 + 4, f"b started {ba.t0 - ab.t0:.1f} s after a"
    w = window(ab, start, start + 0.8)
    assert w["expected"] in (80, 81) and w["lost"] <= 1


def test_one_process_serves_several_streams(tmp_path):
    """Two processes of two streams each (a port apiece, as a fault run's flows): every
    stream's file has its own start line, only its peer's probes, and its sent count."""
    base = [sys.executable, "-m", "traffic.probe", "--rate", "50", "--duration", "2"]

    def streams(me: str, bind: str, peer: str, addr: str) -> list[str]:
        return [arg for flow in (0, 1) for arg in (
            "--stream", f"{me}{flow},{bind},{47990 + flow},{tmp_path / f'{me}{flow}.jsonl'},"
                        f"{peer}{flow}={addr}")]

    pa = subprocess.Popen(base + streams("a", "127.0.0.1", "b", "127.0.0.2"))
    pb = subprocess.Popen(base + streams("b", "127.0.0.2", "a", "127.0.0.1"))
    assert pa.wait(30) == 0 and pb.wait(30) == 0
    for me, peer in (("a", "b"), ("b", "a")):
        for flow in (0, 1):
            lines = [json.loads(x) for x in (tmp_path / f"{me}{flow}.jsonl").read_text()
                     .splitlines()]
            assert lines[0]["start"] == f"{me}{flow}" and lines[0]["peers"] == [f"{peer}{flow}"]
            arrivals = lines[1:-1]
            assert arrivals and {(r["s"], r["d"]) for r in arrivals} == {(f"{peer}{flow}",
                                                                          f"{me}{flow}")}
            assert lines[-1] == {"stop": f"{me}{flow}", "sent": {f"{peer}{flow}": 100}}


@pytest.mark.parametrize("stream,why", [
    ("a,127.0.0.1,47990,/dev/null", "NAME,BIND,PORT,OUT,PEER=IP"),
    ("a,127.0.0.1", "NAME,BIND,PORT,OUT,PEER=IP"),
    ("a,127.0.0.1,http,/dev/null,b=127.0.0.2", "PORT must be 1..65535, not 'http'"),
    ("a,127.0.0.1,70000,/dev/null,b=127.0.0.2", "PORT must be 1..65535"),
])
def test_a_bad_stream_is_one_line_and_exit_2(tmp_path, stream, why):
    done = subprocess.run([sys.executable, "-m", "traffic.probe", "--duration", "1",
                           "--stream", stream], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 2 and why in done.stderr.splitlines()[-1], done.stderr
    assert list(tmp_path.iterdir()) == []  # nothing created
