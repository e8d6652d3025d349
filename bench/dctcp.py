"""DCTCP against Reno and CUBIC on one switch: queue occupancy in packets.

The reproduction of Mininet-HiFi (Handigol et al., CoNEXT 2012) of DCTCP's Figure 1
(Alizadeh et al., SIGCOMM 2010): with a 425-packet switch queue, two long-lived TCP flows
keep it at about 345 packets; DCTCP, with the switch marking CE above K = 20 packets,
keeps it at about 20, for the same throughput.

Three hosts on one switch (an Open vSwitch bridge, kernel datapath where it exists), two
senders with long-lived iperf3 flows to the third. The switch port to the receiver is the
bottleneck: HTB at the link rate and under it either RED marking CE from K packets
(DCTCP) or a drop-tail FIFO of 425 packets (Reno, CUBIC). The queue is sampled every
10 ms over netlink, from 2 s after the flows start (past slow start).

Every host takes the variant's congestion control from its route (``ip route ...
congctl dctcp``): a network namespace may not set ``net.ipv4.tcp_congestion_control``
to an algorithm outside the host's ``tcp_allowed_congestion_control`` (EPERM), and
DCTCP on the senders alone falls back to Reno, because a listener that is not DCTCP
refuses ECN to a SYN sent with ECT.

Each sender's interface holds a 1 us netem delay. netem releases a packet's charge
against its socket (``skb_orphan_partial``), as a real NIC does once the frame is on the
wire. Without it, a packet that crossed the veth pair into the switch stays charged to
the sender, TCP Small Queues count the emulated switch's queue as the sender's own and
cap each flow near 90 packets in flight: measured in the lab VM, Reno's median queue
was 74-157 packets and the 425-packet FIFO never dropped; with it, 347 (published 345).

The link runs at 30 Mb/s by default, not the published 100: the lab VM under software
emulation carried about 65 Mb/s through this dumbbell in all, at every rate tried. The
queue in packets does not depend on the rate; with KVM, try ``--mbps 100``.

Targets, set before the first run (exit status 1 when one is missed): DCTCP's median
queue at most 2 K packets; Reno's and CUBIC's at least 200 packets (about half the
queue); the bottleneck busy, at least 90 % of the link rate, in every variant. The link
rate is read from the bottleneck's byte counter over the same window as the queue (past
the warm-up); iperf3's goodput per flow, slow start included, is printed beside it.

    python -m bench.dctcp [--mbps 100] [--seconds 20] [--k 20] [--out DIR]

Needs root and a kernel with sch_red and tcp_dctcp: the lab VM has them (``make
vm-bench``); elsewhere it says what is missing and measures nothing (exit status 0).
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

from testbed.host.naming import forget, new_run_id, register, run_prefix

QUEUE_PACKETS = 425  # the published switch queue
MTU = 1500
PUBLISHED = {"dctcp": 20, "reno": 345}  # Mininet-HiFi / DCTCP paper, median packets
VARIANTS = ("dctcp", "reno", "cubic")
WARMUP_S = 2.0
SUBNET = "10.200.0"
LINE_SHARE = 0.9  # of the link rate, both flows together
FIFO_MEDIAN_MIN = 200  # packets: Reno and CUBIC fill at least half the queue


def sh(*argv: str, netns: str | None = None) -> str:
    full = (["ip", "netns", "exec", netns] if netns else []) + list(argv)
    return subprocess.run(full, capture_output=True, text=True, check=True).stdout


def missing_features() -> list[str]:
    """What this kernel lacks for the bench (loads the modules where it can)."""
    subprocess.run(["modprobe", "-qa", "tcp_dctcp", "sch_red", "sch_netem"], capture_output=True)
    missing = []
    if "dctcp" not in Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text():
        missing.append("tcp_dctcp")
    for qdisc in ("sch_red", "sch_netem"):
        if not Path(f"/sys/module/{qdisc}").exists():
            missing.append(qdisc)
    return missing


def bottleneck_argv(port: str, variant: str, mbps: float, k: int) -> list[list[str]]:
    """tc lines for the switch port to the receiver: HTB at ``mbps``, then RED marking
    at K packets (dctcp) or a 425-packet drop-tail FIFO.

    >>> [" ".join(a[4:7]) for a in bottleneck_argv("p3", "dctcp", 100, 20)][2]
    'p3 parent 1:1'
    >>> bottleneck_argv("p3", "reno", 100, 20)[2][-3:]
    ['pfifo', 'limit', '425']
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
    """h1, h2 -> switch -> h3, every name with the run's prefix, registered for ``testbed
    clean``; removed (processes first) when ``stack`` closes."""

    def __init__(self, stack: ExitStack, run_id: str) -> None:
        self.prefix = prefix = run_prefix(run_id)
        self.switch = f"{prefix}s"
        self.hosts = [f"{prefix}h{i}" for i in (1, 2, 3)]
        self.procs: list[subprocess.Popen] = []
        sh("ovs-vsctl", "add-br", self.switch, "--", "set", "bridge", self.switch,
           "fail_mode=standalone", f"external_ids:testbed_run={run_id}")
        register(run_id, "bridge", self.switch)
        stack.callback(lambda: (sh("ovs-vsctl", "--if-exists", "del-br", self.switch),
                                forget(run_id, "bridge", self.switch)))
        for i, host in enumerate(self.hosts, start=1):
            sh("ip", "netns", "add", host)
            register(run_id, "netns", host)
            stack.callback(lambda host=host: (
                subprocess.run(["ip", "netns", "del", host], capture_output=True),
                forget(run_id, "netns", host)))
            port, eth = f"{prefix}p{i}", f"{prefix}e{i}"
            sh("ip", "link", "add", port, "type", "veth", "peer", "name", eth, "netns", host)
            sh("ovs-vsctl", "add-port", self.switch, port)
            for dev, ns in ((port, None), (eth, host)):
                # packets, not 64 KB segments, are what the queue holds
                sh("ethtool", "-K", dev, "tso", "off", "gso", "off", "gro", "off", netns=ns)
                sh("ip", "link", "set", dev, "mtu", str(MTU), "up", netns=ns)
            sh("ip", "addr", "add", f"{SUBNET}.{i}/24", "dev", eth, netns=host)
            sh("ip", "link", "set", "lo", "up", netns=host)
            if i < 3:  # a sender's NIC frees what it sent (see the module's docstring)
                sh("tc", "qdisc", "add", "dev", eth, "root", "netem", "delay", "1us",
                   netns=host)
        stack.callback(self.stop_all)  # runs before the namespaces go
        self.bottleneck = f"{prefix}p3"

    def configure(self, variant: str, mbps: float, k: int) -> None:
        subprocess.run(["tc", "qdisc", "del", "dev", self.bottleneck, "root"],
                       capture_output=True)
        for argv in bottleneck_argv(self.bottleneck, variant, mbps, k):
            sh(*argv)
        for i, host in enumerate(self.hosts, start=1):
            sh("ip", "route", "replace", f"{SUBNET}.0/24", "dev", f"{self.prefix}e{i}",
               "proto", "kernel", "scope", "link", "src", f"{SUBNET}.{i}",
               "congctl", variant, netns=host)

    def spawn(self, host: str, *argv: str, **kw) -> subprocess.Popen:
        proc = subprocess.Popen(["ip", "netns", "exec", host, *argv], **kw)
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        self.procs.clear()


def leaf_stats(ipr: IPRoute, index: int) -> tuple[int, int] | None:
    """Packets queued in and bytes sent by the bottleneck's leaf qdisc (handle 10:), or
    None when not found."""
    for msg in ipr.get_qdiscs(index):
        if msg["handle"] == 0x100000:
            stats = msg.get_attr("TCA_STATS")
            return stats["qlen"], stats["bytes"]
    return None


def ss_line(net: Dumbbell, host: str) -> str:
    """The congestion-control words of the sender's data connection (``ss -tin``)."""
    lines = sh("ss", "-tin", "dst", f"{SUBNET}.3", netns=host).splitlines()
    info = [ln.strip() for ln in lines if ln.startswith(("\t", " "))]
    return max(info, key=lambda ln: int(ln.split("bytes_sent:")[1].split()[0])
               if "bytes_sent:" in ln else -1, default="")


def run_variant(net: Dumbbell, variant: str, mbps: float, k: int, seconds: float,
                out: Path) -> dict:
    net.configure(variant, mbps, k)
    h1, h2, h3 = net.hosts
    servers = [net.spawn(h3, "iperf3", "-s", "-1", "-p", str(5201 + i),
                         stdout=subprocess.DEVNULL) for i in range(2)]
    time.sleep(1)
    clients = [net.spawn(h, "iperf3", "-c", f"{SUBNET}.3", "-p", str(5201 + i),
                         "-t", str(seconds), "-J", stdout=subprocess.PIPE, text=True)
               for i, h in enumerate((h1, h2))]
    series: list[tuple[float, int]] = []
    sent: list[tuple[float, int]] = []  # (time, bytes) past the warm-up
    cc = ""
    with IPRoute() as ipr:
        index = ipr.link_lookup(ifname=net.bottleneck)[0]
        start = time.monotonic()
        while (now := time.monotonic() - start) < seconds:
            stats = leaf_stats(ipr, index)
            if stats is not None:
                series.append((round(now, 3), stats[0]))
                if now > WARMUP_S:
                    sent.append((now, stats[1]))
            if not cc and now > WARMUP_S:
                cc = ss_line(net, h1)
            time.sleep(0.01)
    goodput = []
    for c in clients:
        report = json.loads(c.communicate(timeout=seconds + 30)[0])
        goodput.append(report["end"]["sum_received"]["bits_per_second"] / 1e6)
    for s in servers:
        s.wait(timeout=10)
    qdisc = sh("tc", "-s", "qdisc", "show", "dev", net.bottleneck)
    (out / f"{variant}-queue.json").write_text(json.dumps(series))
    (out / f"{variant}-qdisc.txt").write_text(qdisc)
    samples = sorted(q for t, q in series if t > WARMUP_S) or [0]
    return {"variant": variant, "samples": len(samples),
            "queue_median": statistics.median(samples),
            "queue_p95": samples[int(0.95 * (len(samples) - 1))],
            "queue_max": samples[-1], "goodput_mbps": [round(g, 1) for g in goodput],
            "link_mbps": round((sent[-1][1] - sent[0][1]) * 8 / (sent[-1][0] - sent[0][0]) / 1e6,
                               1) if len(sent) > 1 else 0.0,
            "sender_tcp": " ".join(cc.split()[:1] + [w for w in cc.split()
                                                      if w.startswith("dctcp:")])}


def verdict(rows: list[dict], mbps: float, k: int) -> list[str]:
    """The targets missed (empty: all met).

    >>> ok = [{"variant": "dctcp", "queue_median": 21, "link_mbps": 29.5},
    ...       {"variant": "reno", "queue_median": 330, "link_mbps": 29.9}]
    >>> verdict(ok, 30, 20)
    []
    >>> verdict([{"variant": "cubic", "queue_median": 150, "link_mbps": 24.0}], 30, 20)
    ['cubic: median queue 150 packets, target >= 200', 'cubic: link 24.0 Mb/s, target >= 27']
    """
    missed = []
    for r in rows:
        q, name = r["queue_median"], r["variant"]
        if name == "dctcp" and q > 2 * k:
            missed.append(f"dctcp: median queue {q:g} packets, target <= {2 * k}")
        if name != "dctcp" and q < FIFO_MEDIAN_MIN:
            missed.append(f"{name}: median queue {q:g} packets, target >= {FIFO_MEDIAN_MIN}")
        if r["link_mbps"] < LINE_SHARE * mbps:
            missed.append(f"{name}: link {r['link_mbps']:.1f} Mb/s, "
                          f"target >= {LINE_SHARE * mbps:g}")
    return missed


def plot(out: Path, mbps: float, k: int) -> Path:
    from testbed.reports.plots import plt, save

    fig, ax = plt.subplots(figsize=(7, 3.5))
    for variant in VARIANTS:
        path = out / f"{variant}-queue.json"
        if path.exists():
            series = json.loads(path.read_text())
            ax.plot([t for t, _ in series], [q for _, q in series], lw=0.8, label=variant)
    ax.axhline(k, color="grey", ls=":", lw=0.8)
    ax.set_xlabel("seconds")
    ax.set_ylabel("packets in the switch queue")
    ax.set_title(f"two long-lived flows into one {mbps:g} Mb/s port, queue {QUEUE_PACKETS} "
                 f"packets, K = {k}", fontsize=9)
    ax.legend(fontsize=8)
    return save(fig, out / "dctcp_queue.png")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mbps", type=float, default=30.0,
                    help="bottleneck rate (the published one: 100, see the docstring)")
    ap.add_argument("--seconds", type=float, default=20.0, help="per variant")
    ap.add_argument("--k", type=int, default=20, help="RED marking threshold, packets")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--out", type=Path, default=Path("results/dctcp"))
    args = ap.parse_args(argv)
    missing = missing_features()
    if missing:
        print(f"not measured: this kernel lacks {', '.join(missing)} (the lab VM has them: "
              "make vm-bench)")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    rows = []
    with ExitStack() as stack:
        net = Dumbbell(stack, new_run_id())
        for variant in args.variants.split(","):
            rows.append(run_variant(net, variant, args.mbps, args.k, args.seconds, args.out))
            print(json.dumps(rows[-1]), flush=True)
    missed = verdict(rows, args.mbps, args.k)
    (args.out / "summary.json").write_text(json.dumps(
        {"mbps": args.mbps, "k": args.k, "queue_limit": QUEUE_PACKETS, "seconds": args.seconds,
         "published": PUBLISHED, "runs": rows, "missed": missed}, indent=2))
    plot(args.out, args.mbps, args.k)
    print("\n| variant | queue p50 | p95 | max | link Mb/s | goodput per flow | published p50 "
          "| sender |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['variant']} | {r['queue_median']:g} | {r['queue_p95']} | {r['queue_max']} "
              f"| {r['link_mbps']} | {' / '.join(map(str, r['goodput_mbps']))} | "
              f"{PUBLISHED.get(r['variant'], '')} | {r['sender_tcp']} |")
    for line in missed:
        print(f"MISS {line}")
    print(f"{'PASS' if not missed else 'MISS'}: figures and dctcp_queue.png in {args.out}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
