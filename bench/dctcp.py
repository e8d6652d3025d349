"""DCTCP against Reno and CUBIC on one switch: queue occupancy in packets.

The reproduction of Mininet-HiFi (Handigol et al., CoNEXT 2012) of DCTCP's Figure 1
(Alizadeh et al., SIGCOMM 2010): with a 425-packet switch queue, two long-lived TCP flows
keep it at about 345 packets; DCTCP, with the switch marking CE above K = 20 packets,
keeps it at about 20, for the same throughput.

Three hosts on one switch (an Open vSwitch bridge, kernel datapath where it exists), two
senders with long-lived iperf3 flows to the third. The switch port to the receiver is the
bottleneck: HTB at the link rate and under it either RED marking CE from K packets
(DCTCP: ``tcp_congestion_control=dctcp`` and ``tcp_ecn=1`` in the hosts) or a drop-tail
FIFO of 425 packets (Reno, CUBIC). The queue is sampled every 10 ms over netlink.

    python -m bench.dctcp [--mbps 100] [--seconds 20] [--k 20] [--out DIR]

Needs root and a kernel with sch_red and tcp_dctcp: the lab VM has them
(``scripts/vm/boot.sh --job`` runs it there, see the README).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from pyroute2 import IPRoute

from testbed.naming import new_run_id, run_prefix

QUEUE_PACKETS = 425  # the published switch queue
MTU = 1500
PUBLISHED = {"dctcp": 20, "reno": 345}  # Mininet-HiFi / DCTCP paper, packets
VARIANTS = ("dctcp", "reno", "cubic")


def sh(*argv: str, netns: str | None = None) -> str:
    full = (["ip", "netns", "exec", netns] if netns else []) + list(argv)
    return subprocess.run(full, capture_output=True, text=True, check=True).stdout


def bottleneck_argv(port: str, variant: str, mbps: float, k: int) -> list[list[str]]:
    """tc lines for the switch port to the receiver: HTB at ``mbps``, then RED marking
    at K packets (dctcp) or a 425-packet drop-tail FIFO.

    >>> [" ".join(a[3:6]) for a in bottleneck_argv("p3", "dctcp", 100, 20)][2]
    'p3 parent 1:1'
    """
    rate = f"{mbps:g}mbit"
    argv = [["tc", "qdisc", "add", "dev", port, "root", "handle", "1:", "htb", "default", "1"],
            ["tc", "class", "add", "dev", port, "parent", "1:", "classid", "1:1", "htb",
             "rate", rate, "ceil", rate]]
    if variant == "dctcp":
        k_bytes = k * MTU
        argv.append(["tc", "qdisc", "add", "dev", port, "parent", "1:1", "handle", "10:",
                     "red", "limit", str(QUEUE_PACKETS * MTU), "min", str(k_bytes),
                     "max", str(k_bytes + MTU), "avpkt", str(MTU), "burst", str(k + 1),
                     "probability", "1", "bandwidth", rate, "ecn"])
    else:
        argv.append(["tc", "qdisc", "add", "dev", port, "parent", "1:1", "handle", "10:",
                     "pfifo", "limit", str(QUEUE_PACKETS)])
    return argv


class Dumbbell:
    """h1, h2 -> switch -> h3, every name with the run's prefix; removed on exit."""

    def __init__(self, stack: ExitStack, prefix: str) -> None:
        self.prefix = prefix
        self.switch = f"{prefix}s"
        self.hosts = [f"{prefix}h{i}" for i in (1, 2, 3)]
        sh("ovs-vsctl", "add-br", self.switch, "--", "set", "bridge", self.switch,
           "fail_mode=standalone", f"external_ids:testbed_run={prefix[2:]}")
        stack.callback(subprocess.run, ["ovs-vsctl", "--if-exists", "del-br", self.switch])
        for i, host in enumerate(self.hosts, start=1):
            sh("ip", "netns", "add", host)
            stack.callback(subprocess.run, ["ip", "netns", "del", host])
            port, eth = f"{prefix}p{i}", f"{prefix}e{i}"
            sh("ip", "link", "add", port, "type", "veth", "peer", "name", eth, "netns", host)
            sh("ovs-vsctl", "add-port", self.switch, port)
            for dev, ns in ((port, None), (eth, host)):
                # packets, not 64 KB segments, are what the queue holds
                sh("ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", netns=ns)
                sh("ip", "link", "set", dev, "mtu", str(MTU), "up", netns=ns)
            sh("ip", "addr", "add", f"10.200.0.{i}/24", "dev", eth, netns=host)
            sh("ip", "link", "set", "lo", "up", netns=host)
        self.bottleneck = f"{prefix}p3"

    def configure(self, variant: str, mbps: float, k: int) -> None:
        subprocess.run(["tc", "qdisc", "del", "dev", self.bottleneck, "root"],
                       capture_output=True)
        for argv in bottleneck_argv(self.bottleneck, variant, mbps, k):
            sh(*argv)
        for host in self.hosts:
            sh("sysctl", "-qw", f"net.ipv4.tcp_congestion_control={variant}", netns=host)
            sh("sysctl", "-qw", f"net.ipv4.tcp_ecn={1 if variant == 'dctcp' else 0}",
               netns=host)


def queue_packets(ipr: IPRoute, index: int) -> int | None:
    """Packets in the bottleneck's leaf qdisc (handle 10:), or None when not found."""
    for msg in ipr.get_qdiscs(index):
        if msg["handle"] == 0x100000:
            return msg.get_attr("TCA_STATS")["qlen"]
    return None


def run_variant(net: Dumbbell, variant: str, mbps: float, k: int, seconds: float,
                out: Path) -> dict:
    net.configure(variant, mbps, k)
    h1, h2, h3 = net.hosts
    servers = [subprocess.Popen(["ip", "netns", "exec", h3, "iperf3", "-s", "-1", "-p",
                                 str(5201 + i)], stdout=subprocess.DEVNULL)
               for i in range(2)]
    time.sleep(1)
    clients = [subprocess.Popen(["ip", "netns", "exec", h, "iperf3", "-c", "10.200.0.3",
                                 "-p", str(5201 + i), "-t", str(seconds), "-J"],
                                stdout=subprocess.PIPE, text=True)
               for i, h in enumerate((h1, h2))]
    samples: list[int] = []
    with IPRoute() as ipr:
        index = ipr.link_lookup(ifname=net.bottleneck)[0]
        start = time.monotonic()
        while time.monotonic() - start < seconds:
            q = queue_packets(ipr, index)
            if q is not None and time.monotonic() - start > 2:  # past slow start
                samples.append(q)
            time.sleep(0.01)
    goodput = []
    for c in clients:
        report = json.loads(c.communicate(timeout=seconds + 30)[0])
        goodput.append(report["end"]["sum_received"]["bits_per_second"] / 1e6)
    for s in servers:
        s.wait(timeout=10)
    marked = sh("tc", "-s", "qdisc", "show", "dev", net.bottleneck)
    (out / f"{variant}-queue.json").write_text(json.dumps(samples))
    (out / f"{variant}-qdisc.txt").write_text(marked)
    ordered = sorted(samples) or [0]
    return {"variant": variant, "samples": len(samples),
            "queue_median": statistics.median(ordered),
            "queue_p95": ordered[int(0.95 * (len(ordered) - 1))],
            "queue_max": ordered[-1], "goodput_mbps": [round(g, 1) for g in goodput]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mbps", type=float, default=100.0, help="bottleneck rate")
    ap.add_argument("--seconds", type=float, default=20.0, help="per variant")
    ap.add_argument("--k", type=int, default=20, help="RED marking threshold, packets")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", type=Path, default=Path("results/dctcp"))
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    subprocess.run(["modprobe", "-a", "tcp_dctcp", "sch_red"], check=False)
    rows = []
    with ExitStack() as stack:
        net = Dumbbell(stack, run_prefix(new_run_id()))
        for variant in args.variants.split(","):
            rows.append(run_variant(net, variant, args.mbps, args.k, args.seconds, args.out))
            print(json.dumps(rows[-1]), flush=True)
    (args.out / "summary.json").write_text(json.dumps(
        {"mbps": args.mbps, "k": args.k, "queue_limit": QUEUE_PACKETS,
         "published": PUBLISHED, "runs": rows}, indent=2))
    print(f"\n{'variant':<8} {'queue p50':>9} {'p95':>5} {'max':>5} {'Mb/s per flow':>16}"
          f"   published")
    for r in rows:
        pub = PUBLISHED.get(r["variant"], "")
        print(f"{r['variant']:<8} {r['queue_median']:>9g} {r['queue_p95']:>5} "
              f"{r['queue_max']:>5} {'/'.join(map(str, r['goodput_mbps'])):>16}   {pub}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
