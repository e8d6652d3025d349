"""On a real fabric (OVS switches, controller): CNPs slow a DCQCN sender down, and a
sprayed, out-of-order message is placed by PSN instead of being counted as lost.

CE marks come from an nftables rule in the receiver's namespace (``ip ecn set ce`` on
ECT(0) RoCE packets at prerouting), so the receiver reads real CE-marked datagrams and
puts real CNPs on the wire; the controller's own marking is not needed for this test.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from testbed.host.files import read_jsonl
from testbed.host.procs import wait_for
from testbed.workloads.generators import TRAFFIC, training_config

pytestmark = pytest.mark.root

CE_RULES = """table ip tbce {
  chain pre {
    type filter hook prerouting priority -300; policy accept;
    udp dport 4791 ip ecn ect0 ip ecn set ce
  }
}
"""

BASE = {"bytes": 400_000, "compute_ms": 5, "rate_mbps": 20, "step_timeout_ms": 500,
        "payload": 4096, "ecn": True, "cnp_interval_us": 50, "spray": False,
        "pattern": "ring", "stride": 0,
        "dcqcn": {"enabled": True, "g": 1 / 16, "rai_mbps": 0.5, "rhai_mbps": 2.0,
                  "timer_us": 2000, "alpha_timer_us": 2000, "byte_counter_kb": 64, "f": 5,
                  "min_rate_mbps": 0.5}}


def _rank(live, tmp: Path, rank: int, node: int, config: Path, *args: str):
    host = live.spec.hosts[node].name
    return live.fabric.spawn(
        host, f"t-rank{rank}",
        [*TRAFFIC, "training", "--rank", str(rank), "--config", str(config),
         "--out", str(tmp / f"rank{rank}.jsonl"), *args],
        pid_dir=live.pid_dir, log=tmp / f"rank{rank}.log")


def test_cnps_slow_the_sender_down(live, tmp_path: Path) -> None:
    """Rank 0 sends to rank 1, whose namespace turns ECT(0) into CE: rank 1 returns CNPs
    and rank 0's reaction point cuts its rate; rank 1 (no CE towards it) stays at line."""
    spec = live.spec
    config = tmp_path / "training.json"
    config.write_text(json.dumps(training_config(spec, {**BASE, "ranks": [0, 2]})))
    receiver = spec.hosts[2].name
    rules = tmp_path / "ce.nft"
    rules.write_text(CE_RULES)
    done = live.fabric.run(receiver, ["nft", "-f", str(rules)])
    assert done.returncode == 0, done.stderr
    try:
        start = f"{time.time() + 2.5:.3f}"
        ranks = [_rank(live, tmp_path, r, node, config, "--duration", "3", "--start-at", start)
                 for r, node in enumerate((0, 2))]
        try:
            assert wait_for(lambda: not any(p.alive() for p in ranks), 30)
        finally:
            for p in ranks:
                p.stop()
    finally:
        live.fabric.run(receiver, ["nft", "delete", "table", "ip", "tbce"])
    sender = list(read_jsonl(tmp_path / "rank0.jsonl"))
    marked = list(read_jsonl(tmp_path / "rank1.jsonl"))
    assert sender and marked, (tmp_path / "rank0.log").read_text()

    def total(recs, key):
        return sum(r[key] for r in recs)

    assert total(marked, "ce_received") > 0
    assert 0 < total(marked, "cnps_sent") <= total(marked, "ce_received")
    assert total(sender, "cnps_received") > 0  # real CNPs crossed the fabric
    assert total(sender, "ce_received") == 0 and total(marked, "cnps_received") == 0
    rates = [p[1] for r in sender for p in r["rate_trace"]]
    assert min(rates) < 0.6 * BASE["rate_mbps"], rates[:20]
    assert all(p[1] == BASE["rate_mbps"] for r in marked for p in r["rate_trace"])


INJECT = r"""
import random, sys, json, socket
from traffic import roce, training
from traffic.rawsock import RawSender
cfg = training.load_config(sys.argv[1])
drop = int(sys.argv[2])
me, peer = cfg.ranks[0], cfg.ranks[1]
chunk = -(-cfg.bytes // 2)
plan = training.split_chunk(chunk, len(me), cfg.payload)
rng = random.Random(5)
psn = [0] * len(me)
for seq in range(2):  # the two steps of a 2-rank all-reduce
    frames = []
    for k, ch in enumerate(me):
        sizes = plan[k]
        for i, size in enumerate(sizes):
            t = roce.FrameTemplate(ch.mac, peer[k].mac, ch.ip, peer[k].ip,
                                   sport=49152 + i % 16, dqpn=seq, payload_len=size)
            frames.append((k, t.frame(psn[k], training.opcode_for(i, len(sizes)), seq)))
            psn[k] += 1
    rng.shuffle(frames)
    if seq == 1 and drop:
        frames.pop()
    senders = [RawSender(ch.iface) for ch in me]
    for k, f in frames:
        senders[k].send(f)
print(json.dumps({"sent": True}))
"""


def test_sprayed_out_of_order_message_is_placed_not_lost(live, tmp_path: Path) -> None:
    """Rank 0 is played by a script that sends each step's packets shuffled, each with its
    own UDP source port (so they also take different spines); rank 1 must complete both
    steps with nothing lost and count the reordering.  Dropping one packet of the second
    step shows the same accounting does count loss."""
    spec = live.spec
    config = tmp_path / "training.json"
    params = {**BASE, "ranks": [0, 2], "bytes": 80_000, "payload": 1000, "ecn": False,
              "spray": True, "step_timeout_ms": 400}
    config.write_text(json.dumps(training_config(spec, params)))
    results = {}
    receiver = spec.hosts[2].name

    def bound() -> bool:
        ss = live.fabric.run(receiver, ["ss", "-Huln", "sport = :4791"]).stdout
        return ss.count("\n") >= spec.planes

    for drop in (0, 1):
        out = tmp_path / f"drop{drop}"
        out.mkdir()
        start = f"{time.time() + 4:.3f}"
        proc = _rank(live, out, 1, 2, config, "--iterations", "1", "--start-at", start)
        try:
            assert wait_for(bound, 10)
            done = live.fabric.run(spec.hosts[0].name,
                                   [sys.executable, "-c", INJECT, str(config), str(drop)])
            assert done.returncode == 0, done.stderr
            assert wait_for(lambda p=proc: not p.alive(), 20)
        finally:
            proc.stop()
        (rec,) = read_jsonl(out / "rank1.jsonl")
        results[drop] = rec
    ok, lossy = results[0], results[1]
    assert ok["complete"] and ok["packets_lost"] == 0 and ok["timeouts"] == 0, ok
    assert ok["bytes_received"] == 80_000 and ok["reordered_packets"] > 10, ok
    assert ok["icrc_errors"] == 0 and ok["duplicate_packets"] == 0
    assert lossy["packets_lost"] == 1 and lossy["timeouts"] == 1, lossy


def test_agent_tcp_ecn_is_set_per_namespace(live) -> None:
    """``agents.ecn`` turns on net.ipv4.tcp_ecn=1 inside the host namespaces only."""
    from testbed.workloads.generators import enable_tcp_ecn

    host = live.spec.hosts[1].name
    sysctl = ["sysctl", "-n", "net.ipv4.tcp_ecn"]
    root_before = Path("/proc/sys/net/ipv4/tcp_ecn").read_text().strip()
    enable_tcp_ecn(live.fabric, [host])
    assert live.fabric.run(host, sysctl).stdout.strip() == "1"
    assert live.fabric.run(live.spec.hosts[3].name, sysctl).stdout.strip() != "1"
    assert Path("/proc/sys/net/ipv4/tcp_ecn").read_text().strip() == root_before
