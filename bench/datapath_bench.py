"""Benchmark: Open vSwitch's kernel datapath against its userspace datapath, the two
backends the lab chooses between (the kernel one wherever the module exists).

The path a packet takes across a two-tier fabric (leaf, spine, leaf) is built once per
datapath, as in :mod:`bench.afxdp_bench`: three bridges in a chain joined by veth pairs,
between two namespaces, port-to-port OpenFlow rules, offloads off, AF_PACKET ports on
the userspace datapath. On each, alternately, ``--rounds`` times:

* TCP: one iperf3 flow of ``--seconds`` across the chain (MTU 1500), its goodput;
* packets: ``traffic replay`` offers 128-byte UDP frames at rising rates; delivered
  fraction, and forwardings (packets x 3 switches) per busy CPU-second of the whole
  machine (the kernel datapath forwards in softirq, not in ovs-vswitchd, so only the
  machine's CPU compares the two; the sender's share is in both).

Then a 20 Mb/s HTB class on the last switch port, offered 60 Mb/s: both datapaths must
hold the egress qdiscs that emulate the lab's links (about 20 Mb/s delivered).

Target (exit status 1 when missed): the lab's choice stands, i.e. the kernel datapath
keeps the qdiscs and its median TCP goodput is at least the userspace datapath's.
Without the kernel module (this development machine) it says so and measures nothing
(exit status 0); the lab VM has it (``make vm-bench``).

    python -m bench.datapath_bench [--rounds 3] [--seconds 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from bench.afxdp_bench import (
    FRAME_BYTES,
    SHAPED_MBPS,
    SWITCHES,
    Chain,
    make_frames,
        sh,
)
from testbed.host.capabilities import probe
from testbed.host.naming import new_run_id, run_prefix
from traffic.pcapfile import write_pcap

DATAPATHS = {"kernel": "system", "userspace": "netdev"}
RATES = (10_000, 25_000, 50_000, 100_000)
ADDRS = ("10.99.0.1", "10.99.0.2")


def busy_cpu_s() -> float:
    """CPU-seconds the whole machine spent not idle (``/proc/stat``)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / 100  # USER_HZ


def verdict(tcp: dict[str, float], shaped: dict[str, float]) -> tuple[bool, str]:
    """Whether the lab's choice of the kernel datapath stands, and why.

    >>> verdict({"kernel": 900.0, "userspace": 120.0}, {"kernel": 19.6, "userspace": 19.4})
    (True, 'the kernel datapath keeps the qdiscs and carries 7.50x the TCP of the userspace one')
    >>> verdict({"kernel": 100.0, "userspace": 120.0}, {"kernel": 19.6, "userspace": 19.4})[0]
    False
    >>> verdict({"kernel": 900.0, "userspace": 120.0}, {"kernel": 59.0, "userspace": 19.4})[1]
    'the kernel datapath sent 59.0 Mb/s through a 20 Mb/s class'
    """
    if not 0 < shaped["kernel"] <= 1.3 * SHAPED_MBPS:
        return False, (f"the kernel datapath sent {shaped['kernel']:.1f} Mb/s through a "
                       f"{SHAPED_MBPS} Mb/s class")
    if not tcp["userspace"] or not tcp["kernel"]:
        return False, "a datapath carried no TCP"
    ratio = tcp["kernel"] / tcp["userspace"]
    if ratio < 1:
        return False, (f"the kernel datapath carries {ratio:.2f}x the TCP of the userspace one: "
                       "the lab should prefer userspace")
    return True, (f"the kernel datapath keeps the qdiscs and carries {ratio:.2f}x the TCP of "
                  "the userspace one")


def tcp_mbps(chain: Chain, seconds: float) -> float:
    server = subprocess.Popen(["ip", "netns", "exec", chain.ns_b, "iperf3", "-s", "-1", "-B",
                               ADDRS[1]], stdout=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        out = sh("ip", "netns", "exec", chain.ns_a, "iperf3", "-c", ADDRS[1], "-t",
                 f"{seconds:g}", "-J")
        return json.loads(out)["end"]["sum_received"]["bits_per_second"] / 1e6
    finally:
        if server.poll() is None:
            server.kill()
        server.wait(timeout=10)


def build(stack: ExitStack, name: str) -> Chain:
    rid = new_run_id()
    chain = Chain(run_prefix(rid), rid, "system", stack, datapath=DATAPATHS[name])
    for ns, dev, addr in ((chain.ns_a, chain.sender, ADDRS[0]),
                          (chain.ns_b, chain.receiver, ADDRS[1])):
        sh("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", dev)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    time.sleep(1.0)  # the userspace datapath opens its packet sockets
    errors = chain.port_errors()
    if errors:
        raise RuntimeError(f"{name} datapath: {'; '.join(errors)}")
    return chain


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=4.0)
    args = ap.parse_args(argv)
    if not probe().ovs_kernel_datapath:
        print("not measured: this kernel has no Open vSwitch datapath module (the lab VM "
              "has it: make vm-bench)")
        return 0
    frames = make_frames(1000)
    tcp: dict[str, list[float]] = {name: [] for name in DATAPATHS}
    shaped: dict[str, float] = {}
    with ExitStack() as stack, tempfile.TemporaryDirectory() as tmp:
        pcap = Path(tmp) / "frames.pcap"
        write_pcap(pcap, frames)
        chains = {name: build(stack, name) for name in DATAPATHS}
        print(f"{SWITCHES} bridges in a chain (leaf, spine, leaf) per datapath; TCP "
              f"{args.seconds:g} s x {args.rounds} alternately; {FRAME_BYTES}-byte frames")
        for _ in range(args.rounds):
            for name, chain in chains.items():
                tcp[name].append(tcp_mbps(chain, args.seconds))
                print(f"  {name:<9} TCP {tcp[name][-1]:8.1f} Mb/s", flush=True)
        for name, chain in chains.items():
            for pps in RATES:
                row = chain.offer(pcap, len(frames), pps, 2.0, cpu_s=busy_cpu_s)
                print(f"  {name:<9} offered {row['offered_pps']:>8,} pps  delivered "
                      f"{row['delivered'] * 100:5.1f} % ({row['delivered_pps']:>8,} pps)  "
                      f"{row['forwardings_per_cpu_s']:>9,} forwardings per busy CPU-s",
                      flush=True)
            shaped[name] = chain.shaped(pcap, len(frames), 2.0)
            print(f"  {name:<9} 60 Mb/s into a {SHAPED_MBPS} Mb/s HTB class: "
                  f"{shaped[name]} Mb/s delivered", flush=True)
    medians = {name: statistics.median(v) for name, v in tcp.items()}
    print(f"TCP medians: kernel {medians['kernel']:.1f} Mb/s, userspace "
          f"{medians['userspace']:.1f} Mb/s")
    ok, why = verdict(medians, shaped)
    print(f"{why} {'PASS' if ok else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
