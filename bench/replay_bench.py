"""Benchmark: our ``python -m traffic replay --topspeed`` against ``tcpreplay --topspeed``.

Creates a uniquely named veth pair (``tb<hex>a``/``tb<hex>b``), writes a pcap of
N random 64..1500-byte UDP frames, runs both replayers on it alternately
(3 rounds by default), prints each run and the median pps ratio ours/tcpreplay,
and always removes the veth pair.  Needs root.

Target: the median ratio ours/tcpreplay is at least ``TARGET`` (1.0: our replay is no
slower than tcpreplay; measured 2.1 on the 2-core development machine). Exit status 1
when it is missed.

    python -m bench.replay_bench [--frames 20000] [--loop 10] [--rounds 3] [--target 1.0]
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from testbed.host.naming import forget, new_run_id, register, run_prefix
from traffic.pcapfile import write_pcap

OFFLOADS = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"]
TARGET = 1.0  # median pps ratio ours / tcpreplay, at least


def verdict(ratios: list[float], target: float = TARGET) -> bool:
    """Whether the median ratio ours/tcpreplay reaches ``target`` (no ratio: a miss).

    >>> verdict([2.1, 0.9, 1.4]), verdict([0.8, 0.95, 1.2]), verdict([])
    (True, False, False)
    """
    return bool(ratios) and statistics.median(ratios) >= target


def make_frames(count: int, seed: int = 1) -> list[bytes]:
    """Random-length (64..1500 bytes) Ether/IPv4/UDP frames to a MAC nobody owns."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    rng = random.Random(seed)
    base = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:99") / IP(
        src="10.99.0.1", dst="10.99.0.2") / UDP(sport=1024, dport=9)
    return [bytes(base / Raw(bytes(rng.randint(64, 1500) - 42))) for _ in range(count)]


def run_tcpreplay(iface: str, pcap: Path, loops: int) -> float:
    out = subprocess.run(["tcpreplay", "--topspeed", "-i", iface, f"--loop={loops}", str(pcap)],
                         check=True, capture_output=True, text=True).stdout
    match = re.search(r"Rated:.*?([\d.]+) pps", out)
    if match is None:
        raise RuntimeError(f"cannot parse tcpreplay output: {out!r}")
    return float(match.group(1))


def run_ours(iface: str, pcap: Path, loops: int) -> float:
    out = subprocess.run([sys.executable, "-m", "traffic", "replay", "--iface", iface, "--pcap",
                          str(pcap), "--loop", str(loops), "--topspeed"],
                         check=True, capture_output=True, text=True).stdout
    return float(json.loads(out)["pps"])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=20000)
    ap.add_argument("--loop", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--target", type=float, default=TARGET,
                    help=f"least median ratio ours/tcpreplay (default {TARGET:g})")
    args = ap.parse_args(argv)
    rid = new_run_id()
    a, b = run_prefix(rid) + "ra", run_prefix(rid) + "rb"
    ratios = []
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    register(rid, "link", a)
    try:
        for dev in (a, b):
            subprocess.run(["ethtool", "-K", dev, *OFFLOADS], check=True, capture_output=True)
            subprocess.run(["ip", "link", "set", dev, "up"], check=True)
        with tempfile.TemporaryDirectory() as tmp:
            pcap = Path(tmp) / "bench.pcap"
            frames = make_frames(args.frames)
            write_pcap(pcap, frames)
            mean_len = sum(map(len, frames)) / len(frames)
            print(f"{len(frames)} frames (mean {mean_len:.0f} B) x {args.loop} loops on {a}")
            for rnd in range(args.rounds):
                theirs = run_tcpreplay(a, pcap, args.loop)
                ours = run_ours(a, pcap, args.loop)
                ratios.append(ours / theirs)
                print(f"round {rnd + 1}: tcpreplay {theirs:,.0f} pps, ours {ours:,.0f} pps, "
                      f"ratio {ours / theirs:.3f}")
    finally:
        subprocess.run(["ip", "link", "del", a], check=False)
        forget(rid, "link", a)
    ok = verdict(ratios, args.target)
    median = statistics.median(ratios) if ratios else float("nan")
    print(f"median ratio ours/tcpreplay: {median:.3f} (target >= {args.target:g}) "
          f"{'PASS' if ok else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
