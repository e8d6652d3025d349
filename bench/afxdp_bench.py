"""Benchmark: the userspace datapath's forwarding with AF_XDP switch ports against today's
AF_PACKET ports, and whether each keeps the egress qdiscs that emulate the lab's links.

The same path a packet takes across a two-tier fabric (leaf, spine, leaf) is built twice,
once per port type: three netdev bridges in a chain, joined by veth pairs, between two
namespaces; port-to-port OpenFlow rules, offloads off. ``traffic replay`` paces 128-byte
UDP frames into one end at rising rates; the other end's receive counter says what was
delivered, ovs-vswitchd's CPU time (``/proc/PID/stat``) what it cost. Reported per type
and rate: delivered fraction, and forwardings (packets x 3 switches) per CPU-second of
ovs-vswitchd. Then a 20 Mb/s HTB class on the last switch port, offered 60 Mb/s: a port
type that keeps qdiscs delivers about 20, one that bypasses them delivers about 60.

AF_XDP here is ``afxdp-nonpmd`` in generic (skb) mode: veth has no zero-copy driver, and
the PMD type busy-polls a core per port thread, half of this 2-core machine.

The lab uses AF_PACKET ports. The bench checks that choice: it fails (exit status 1)
when AF_XDP keeps the qdiscs *and* forwards faster (then the lab should switch), or when
a port type delivers nothing (a broken measurement). Measured on the 2-core development
machine: AF_XDP transmits around the qdisc (the HTB class saw one packet; 100 Mb/s went
through a 20 Mb/s class), so the lab keeps AF_PACKET; see the closing note of the run.

    python -m bench.afxdp_bench [--seconds 2] [--rates 25000,50000,100000,150000,200000]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from testbed.host.naming import forget, new_run_id, register, run_prefix
from traffic.pcapfile import write_pcap

PORT_TYPES = {"AF_PACKET": "system", "AF_XDP": "afxdp-nonpmd"}
SWITCHES = 3  # leaf, spine, leaf
FRAME_BYTES = 128
SHAPED_MBPS, OFFERED_MBPS = 20, 60
OFFLOADS = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"]


@dataclass
class Result:
    port_type: str
    error: str = ""
    rows: list[dict] = field(default_factory=list)  # offered/delivered pps, cpu
    shaped_mbps: float = 0.0

    @property
    def keeps_qdisc(self) -> bool:
        return 0 < self.shaped_mbps <= 1.3 * SHAPED_MBPS

    @property
    def best_pps(self) -> float:
        """The highest delivered rate with at least 99 % of the offered frames through."""
        return max((r["delivered_pps"] for r in self.rows if r["delivered"] >= 0.99), default=0)

    @property
    def per_cpu_s(self) -> float:
        """Forwardings per CPU-second of ovs-vswitchd, at the highest offered rate."""
        return self.rows[-1]["forwardings_per_cpu_s"] if self.rows else 0.0


def verdict(packet: Result, xdp: Result) -> tuple[bool, str]:
    """Whether the lab's choice of AF_PACKET ports stands, and why.

    >>> a = Result("system", rows=[dict(delivered=1.0, delivered_pps=9e4,
    ...                                 forwardings_per_cpu_s=1e5)], shaped_mbps=19.5)
    >>> x = Result("afxdp", rows=[dict(delivered=1.0, delivered_pps=2e5,
    ...                                forwardings_per_cpu_s=4e5)], shaped_mbps=59.0)
    >>> verdict(a, x)
    (True, 'AF_XDP bypasses the egress qdiscs (59.0 Mb/s through a 20 Mb/s class): AF_PACKET stays')
    >>> x.shaped_mbps = 19.8
    >>> verdict(a, x)[0]
    False
    >>> verdict(Result("system", error="no frames delivered"), x)[0]
    False
    """
    for r in (packet, xdp):
        if r.error:
            return False, f"{r.port_type}: {r.error}"
    if not xdp.keeps_qdisc:
        return True, (f"AF_XDP bypasses the egress qdiscs ({xdp.shaped_mbps:.1f} Mb/s through a "
                      f"{SHAPED_MBPS} Mb/s class): AF_PACKET stays")
    if xdp.best_pps > packet.best_pps:
        return False, "AF_XDP keeps the qdiscs and forwards faster: the lab should use it"
    return True, "AF_XDP keeps the qdiscs but is not faster: AF_PACKET stays"


def sh(*argv: str, check: bool = True) -> str:
    return subprocess.run(argv, check=check, capture_output=True, text=True).stdout


def rx_counters(ns: str, dev: str) -> tuple[int, int]:
    stats = json.loads(sh("ip", "-n", ns, "-j", "-s", "link", "show", dev))[0]["stats64"]["rx"]
    return stats["packets"], stats["bytes"]


def vswitchd_cpu_s() -> float:
    pid = int(Path("/var/run/openvswitch/ovs-vswitchd.pid").read_text())
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Chain:
    """ns A - leaf - spine - leaf - ns B, every switch port of ``port_type``, the bridges
    on ``datapath`` (``netdev``: userspace; ``system``: the kernel module)."""

    def __init__(self, prefix: str, rid: str, port_type: str, stack: ExitStack,
                 datapath: str = "netdev") -> None:
        p = prefix
        self.ns_a, self.ns_b = p + "xna", p + "xnb"
        self.bridges = [f"{p}xs{i}" for i in range(SWITCHES)]
        # (switch-side end, other end, namespace of the other end or "")
        pairs = [(f"{p}xa1", f"{p}xa0", self.ns_a)]
        pairs += [(f"{p}xl{i}a", f"{p}xl{i}b", "") for i in range(SWITCHES - 1)]
        pairs += [(f"{p}xb1", f"{p}xb0", self.ns_b)]
        self.sender, self.receiver = pairs[0][1], pairs[-1][1]
        self.last_port = pairs[-1][0]
        for ns in (self.ns_a, self.ns_b):
            sh("ip", "netns", "add", ns)
            register(rid, "netns", ns)
            stack.callback(lambda ns=ns: (sh("ip", "netns", "del", ns, check=False),
                                          forget(rid, "netns", ns)))
        for a, b, ns in pairs:
            sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
            register(rid, "link", a)
            stack.callback(lambda a=a: (sh("ip", "link", "del", a, check=False),
                                        forget(rid, "link", a)))
            for dev in (a, b):
                sh("ethtool", "-K", dev, *OFFLOADS)
                sh("ip", "link", "set", dev, "up")
            if ns:
                sh("ip", "link", "set", b, "netns", ns)
                sh("ip", "-n", ns, "link", "set", b, "up")
        # switch i: port toward A, port toward B
        ports = [(pairs[i][0] if i == 0 else pairs[i][1], pairs[i + 1][0])
                 for i in range(SWITCHES)]
        for br, (west, east) in zip(self.bridges, ports, strict=True):
            extra: list[str] = []
            for port in (west, east):
                extra += ["--", "add-port", br, port]
                if port_type != "system":
                    extra += ["--", "set", "interface", port, f"type={port_type}",
                              "options:xdp-mode=generic"]
            sh("ovs-vsctl", "add-br", br, "--", "set", "bridge", br, f"datapath_type={datapath}",
               "protocols=OpenFlow13", *extra)
            register(rid, "bridge", br)
            stack.callback(lambda br=br: (sh("ovs-vsctl", "--if-exists", "del-br", br),
                                          forget(rid, "bridge", br)))
            sh("ovs-ofctl", "-O", "OpenFlow13", "del-flows", br)
            for src, dst in ((west, east), (east, west)):
                sh("ovs-ofctl", "-O", "OpenFlow13", "add-flow", br,
                   f"in_port={src},actions=output:{dst}")
        self.ports = [p for pair in ports for p in pair]

    def port_errors(self) -> list[str]:
        out = []
        for port in self.ports:
            err = sh("ovs-vsctl", "get", "interface", port, "error").strip().strip('"')
            if err and err != "[]":
                out.append(f"{port}: {err}")
        return out

    def replay(self, pcap: Path, loops: int, *, pps: float = 0, mbps: float = 0) -> dict:
        rate = ["--pps", str(pps)] if pps else ["--mbps", str(mbps)]
        out = sh("ip", "netns", "exec", self.ns_a, sys.executable, "-m", "traffic", "replay",
                 "--iface", self.sender, "--pcap", str(pcap), "--loop", str(loops), *rate)
        return json.loads(out)

    def offer(self, pcap: Path, frames: int, pps: float, seconds: float,
              cpu_s: Callable[[], float] = vswitchd_cpu_s) -> dict:
        """``pps`` frames a second for ``seconds``: what was delivered, and what it cost in
        ``cpu_s``'s CPU-seconds (ovs-vswitchd's by default)."""
        rx0, _ = rx_counters(self.ns_b, self.receiver)
        cpu0, t0 = cpu_s(), time.monotonic()
        sent = self.replay(pcap, max(1, round(pps * seconds / frames)), pps=pps)
        time.sleep(0.3)  # what is still in the switches' queues
        rx1, _ = rx_counters(self.ns_b, self.receiver)
        cpu, wall = cpu_s() - cpu0, time.monotonic() - t0
        delivered = rx1 - rx0
        return {"offered_pps": round(sent["pps"]), "delivered": delivered / sent["packets"],
                "delivered_pps": round(delivered / sent["seconds"]),
                "cpu_cores": round(cpu / wall, 2),
                "forwardings_per_cpu_s": round(delivered * SWITCHES / cpu) if cpu else 0}

    def shaped(self, pcap: Path, frames: int, seconds: float) -> float:
        """Mb/s delivered through a SHAPED_MBPS HTB class on the last switch port."""
        dev = self.last_port
        sh("tc", "qdisc", "add", "dev", dev, "root", "handle", "1:", "htb", "default", "10")
        sh("tc", "class", "add", "dev", dev, "parent", "1:", "classid", "1:10", "htb", "rate",
           f"{SHAPED_MBPS}mbit", "burst", "30k")
        try:
            _, b0 = rx_counters(self.ns_b, self.receiver)
            bits = OFFERED_MBPS * 1e6 * seconds
            sent = self.replay(pcap, max(1, round(bits / (frames * FRAME_BYTES * 8))),
                               mbps=OFFERED_MBPS)
            time.sleep(0.3)
            _, b1 = rx_counters(self.ns_b, self.receiver)
            return round((b1 - b0) * 8 / sent["seconds"] / 1e6, 1)
        finally:
            sh("tc", "qdisc", "del", "dev", dev, "root", check=False)


def make_frames(count: int) -> list[bytes]:
    """128-byte UDP frames to a MAC nobody owns (counted on receive, answered by nobody)."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    base = Ether(src="02:00:00:00:00:01", dst="02:00:00:00:00:99") / IP(
        src="10.99.0.1", dst="10.99.0.2")
    return [bytes(base / UDP(sport=1024 + i, dport=9) / Raw(bytes(FRAME_BYTES - 42)))
            for i in range(count)]


def measure(port_type: str, pcap: Path, frames: int, rates: list[float],
            seconds: float) -> Result:
    rid = new_run_id()
    result = Result(port_type)
    with ExitStack() as stack:
        chain = Chain(run_prefix(rid), rid, port_type, stack)
        time.sleep(1.0)  # ports open their sockets (AF_XDP: loads its XDP program)
        errors = chain.port_errors()
        if errors:
            result.error = "; ".join(errors)
            return result
        chain.replay(pcap, 1, pps=10000)  # warm up
        for pps in rates:
            row = chain.offer(pcap, frames, pps, seconds)
            result.rows.append(row)
            print(f"  {port_type:<13} offered {row['offered_pps']:>8,} pps  delivered "
                  f"{row['delivered'] * 100:5.1f} % ({row['delivered_pps']:>8,} pps)  "
                  f"ovs-vswitchd {row['cpu_cores']:.2f} cores, "
                  f"{row['forwardings_per_cpu_s']:>9,} forwardings/CPU-s", flush=True)
        result.shaped_mbps = chain.shaped(pcap, frames, seconds)
        print(f"  {port_type:<13} {OFFERED_MBPS} Mb/s into a {SHAPED_MBPS} Mb/s HTB class: "
              f"{result.shaped_mbps} Mb/s delivered", flush=True)
    if not any(r["delivered"] > 0 for r in result.rows):
        result.error = "no frames delivered"
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--rates", default="25000,50000,100000,150000,200000",
                    help="offered packets per second, comma-separated")
    args = ap.parse_args(argv)
    rates = [float(r) for r in args.rates.split(",")]
    frames = make_frames(1000)
    with tempfile.TemporaryDirectory() as tmp:
        pcap = Path(tmp) / "frames.pcap"
        write_pcap(pcap, frames)
        print(f"{SWITCHES} netdev bridges in a chain (leaf, spine, leaf), {FRAME_BYTES}-byte "
              f"frames, {args.seconds:g} s per rate")
        results = {name: measure(t, pcap, len(frames), rates, args.seconds)
                   for name, t in PORT_TYPES.items()}
    packet, xdp = results["AF_PACKET"], results["AF_XDP"]
    if packet.best_pps and xdp.best_pps:
        print(f"highest rate with >= 99 % delivered: AF_XDP {xdp.best_pps:,.0f} pps, AF_PACKET "
              f"{packet.best_pps:,.0f} pps, ratio {xdp.best_pps / packet.best_pps:.2f}")
    if packet.per_cpu_s and xdp.per_cpu_s:
        print(f"forwardings per CPU-second of ovs-vswitchd at the highest rate offered "
              f"({xdp.rows[-1]['offered_pps']:,} and {packet.rows[-1]['offered_pps']:,} pps): "
              f"AF_XDP {xdp.per_cpu_s:,.0f}, AF_PACKET {packet.per_cpu_s:,.0f}, "
              f"ratio {xdp.per_cpu_s / packet.per_cpu_s:.2f}")
        top = max(r["delivered_pps"] for r in xdp.rows), max(r["delivered_pps"] for r in
                                                             packet.rows)
        print(f"most delivered: AF_XDP {top[0]:,} pps, AF_PACKET {top[1]:,} pps, "
              f"ratio {top[0] / top[1]:.2f}")
    ok, why = verdict(packet, xdp)
    print(f"{why} {'PASS' if ok else 'MISS'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
