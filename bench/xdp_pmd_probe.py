"""Probe: can ports on PMD threads that sleep when idle (``pmd-maxsleep``), AF_XDP or
DPDK's af_packet driver, make the userspace datapath cheap at light load, with every link
still shaped?

AF_XDP transmits around a port's egress qdisc (``bench.afxdp_bench``), so here a link
between two switch ports is two veth pairs joined by tc ``mirred`` redirects through a
pair of *link ends* in the root namespace, and the link's shaping is the link ends'
egress qdiscs (TBF), which no switch process touches: switch port a -> (veth) -> link end
a -> mirred -> egress of link end b (shaped) -> (veth) -> switch port b, and back.

One private ovs-vswitchd (:class:`testbed.fabric.switchd.SwitchDaemons`; the host's Open vSwitch
is not touched) holds a chain of three bridges (leaf, spine, leaf) between two
namespaces. Two ways, side by side on the same chain shape:

- ``packet``: today's ports (AF_PACKET, the main thread polls them), links shaped on the
  switch ports;
- ``xdp``: AF_XDP ports (generic XDP on veth) polled by one PMD thread that may sleep up
  to ``--maxsleep`` microseconds when idle, links shaped on the link ends.

For each: ovs-vswitchd's CPU per forwarding (a frame received by a switch port) while
one namespace pings the other 100 times a second, the ping's round trip, and the rate
UDP offered at three times a link's rate gets through (the hosts' NICs send unshaped, so
the shaping of the switches' links holds when it is about the link's rate).

A third way, ``xdp-direct``, joins the switch ports by plain veth pairs (nothing shaped)
to measure what the PMD costs on its own. A fourth, ``dpdk``, runs Debian's DPDK build of
ovs-vswitchd (openvswitch-switch-dpdk with the librte-net-af-packet23 and
librte-mempool-ring23 drivers, DPDK 22.11 on anonymous memory: no huge pages) with every
switch port a DPDK af_packet device (``net_af_packetN,iface=PORT,qdisc_bypass=0``: its
memory-mapped rings are read without a system call and it transmits through the port's
qdiscs, so the links are shaped on the switch ports as in ``packet``).

    python -m bench.xdp_pmd_probe [--seconds 5] [--maxsleep 200] [--mtu 1500]
                                  [--ways packet,xdp,xdp-direct,dpdk]

Measured on the 2-core development machine (KVM, AMD EPYC, kernel 6.18, Open vSwitch
3.1), one run each, nothing else running; us per forwarding at 100 pings a second:

| way | pmd-maxsleep | us / forwarding | ping round trip | idle cores |
|---|---|---|---|---|
| packet | - | 89-100 | 0.53-0.57 ms | 0.005 |
| xdp-direct | 200 us | 313 | 0.48 ms | 0.105 |
| xdp-direct | 1,000 us | 67 | 4.2 ms | 0.035 |
| xdp-direct | 10,000 us | 50 | 11.6 ms | 0.020 |
| xdp (mirred-shaped links) | 200 us | - (nothing delivered) | - | 0.12 |
| packet (again, with dpdk) | - | 77 | 0.45 ms | 0.0 |
| dpdk | 200 us | 183 | 1.2 ms | 0.115 |
| dpdk | 1,000 us | 70 | 1.7 ms | 0.02 |
| dpdk, ``--mtu 9000`` | any | no port opens: frames over 1,518 bytes refused | - | - |

At light load a sleeping PMD's cost is its idle polling, not the packets: it is cheaper
than the main thread only when it sleeps so long that every hop adds milliseconds, and
then by less than 2x. And frames an AF_XDP port transmits do not survive the mirred
redirect: ARP requests reach the far veth's counters but no socket there sees them, so
the shaped-link design fails before its cost matters. DPDK's af_packet driver keeps the
shaping but has the same idle cost, adds more latency, and DPDK 22.11's driver takes no
frame longer than 1,518 bytes, while every fabric scenario of the lab runs 9,000-byte
frames. Not in ``make bench``: a probe whose answer is recorded here and in the docs'
switch page.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from testbed.fabric.switchd import SwitchDaemons
from testbed.host.naming import claim, forget, new_run_id, register, run_prefix

SWITCHES = 3
LINK_MBPS = 20
UDP_BYTES = 1400
OFFLOADS = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"]


def sh(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class PortError(RuntimeError):
    """A switch port the chain's ovs-vswitchd could not open."""


class Chain:
    def __init__(self, way: str, stack: ExitStack, maxsleep: int, mtu: int = 1500) -> None:
        rid = new_run_id()
        p = run_prefix(rid)
        self.way, self.rid, self.p, self.mtu = way, rid, p, mtu
        self.ns = [p + "na", p + "nb"]
        for ns in self.ns:
            sh("ip", "netns", "add", ns)
            register(rid, "netns", ns)
            stack.callback(lambda ns=ns: (sh("ip", "netns", "del", ns, check=False),
                                          forget(rid, "netns", ns)))
        self.bridges = [f"{p}s{i}" for i in range(SWITCHES)]
        # links: (west end, east end): west is a host NIC (in ns a) or a switch port
        self.ports: dict[str, list[str]] = {b: [] for b in self.bridges}
        self.shaped: list[str] = []
        hops = ["a"] + self.bridges + ["b"]
        for i in range(len(hops) - 1):
            self._link(i, hops[i], hops[i + 1], stack)
        run = claim(rid)  # /run/testbed/RUNID: testbed clean finds what a kill leaves
        stack.callback(lambda: shutil.rmtree(run, ignore_errors=True))
        dpdk = {}
        if way == "dpdk":
            eal = (f"--no-huge -m {DPDK_MEMORY_MB} --no-pci --no-shconf --legacy-mem "
                   f"--no-telemetry --file-prefix={rid}")
            dpdk = {"binary": str(DPDK_VSWITCHD), "other_config": [
                "dpdk-init=true", f'dpdk-extra="{eal}"', "pmd-cpu-mask=0x2",
                f"pmd-maxsleep={maxsleep}"]}
        self.daemons = SwitchDaemons([self.bridges], folder=run / "switch", **dpdk)
        stack.callback(self.daemons.stop)
        self.daemons.start()
        inst = self.daemons.instances[0]
        devices = 0
        if way.startswith("xdp"):
            self.daemons.vsctl(inst, ["set", "Open_vSwitch", ".",
                                      "other_config:pmd-cpu-mask=0x2",
                                      f"other_config:pmd-maxsleep={maxsleep}"])
        for br in self.bridges:
            args = ["add-br", br, "--", "set", "bridge", br, "datapath_type=dummy",
                    "protocols=OpenFlow13", "fail_mode=secure"]
            for port in self.ports[br]:
                args += ["--", "add-port", br, port]
                if way.startswith("xdp"):
                    args += ["--", "set", "interface", port, "type=afxdp",
                             "options:xdp-mode=generic", "options:n_rxq=1"]
                elif way == "dpdk":  # through the port's qdiscs: qdisc_bypass=0
                    args += ["--", "set", "interface", port, "type=dpdk",
                             f"options:dpdk-devargs=net_af_packet{devices},iface={port},"
                             f"qdisc_bypass=0,{ring_args(mtu)}", f"mtu_request={mtu}"]
                    devices += 1
            self.daemons.vsctl(inst, args)
            if errors := self.errors([br]):
                log = self.daemons.folder / "ovs-vswitchd0.log"
                first = next((line.split("|ERR|", 1)[1] for line in
                              log.read_text().splitlines() if "|ERR|" in line), "")
                raise PortError(f"port errors: {errors[0]}; ovs-vswitchd: {first}")
            west, east = self.ports[br]
            mgmt = self.daemons.mgmt(br)
            if not _wait(lambda m=mgmt: Path(m[5:]).exists(), 10):
                raise RuntimeError(f"{br}: no management socket")
            for src, dst in ((west, east), (east, west)):
                sh("ovs-ofctl", "-O", "OpenFlow13", "add-flow", mgmt,
                   f"in_port={src},actions=output:{dst}")
        sh("ip", "-n", self.ns[0], "addr", "add", "10.9.0.1/24", "dev", p + "ha")
        sh("ip", "-n", self.ns[1], "addr", "add", "10.9.0.2/24", "dev", p + "hb")
        self.pid = self.daemons.pids()[0]

    def _veth(self, a: str, b: str, stack: ExitStack, ns_a: str = "", ns_b: str = "") -> None:
        sh("ip", "link", "add", a, "type", "veth", "peer", "name", b)
        register(self.rid, "link", a)
        stack.callback(lambda: (sh("ip", "link", "del", a, check=False),
                                forget(self.rid, "link", a)))
        sh("ip", "link", "set", a, "mtu", str(self.mtu))
        sh("ip", "link", "set", b, "mtu", str(self.mtu))
        for dev, ns in ((a, ns_a), (b, ns_b)):
            sh("ethtool", "-K", dev, *OFFLOADS, check=False)
            if ns:
                sh("ip", "link", "set", dev, "netns", ns)
            sh("ip", *(["-n", ns] if ns else []), "link", "set", dev, "up")

    def _link(self, i: int, west: str, east: str, stack: ExitStack) -> None:
        p = self.p
        w_end = p + "ha" if west == "a" else f"{p}l{i}w"  # west's interface
        e_end = p + "hb" if east == "b" else f"{p}l{i}e"
        w_ns = self.ns[0] if west == "a" else ""
        e_ns = self.ns[1] if east == "b" else ""
        if west != "a":
            self.ports[west].append(w_end)
        if east != "b":
            self.ports[east].append(e_end)
        if self.way == "xdp-direct":  # the cost alone: veth straight, nothing shaped
            self._veth(w_end, e_end, stack, w_ns, e_ns)
            return
        if self.way in ("packet", "dpdk"):
            self._veth(w_end, e_end, stack, w_ns, e_ns)
            for dev, ns in ((w_end, w_ns), (e_end, e_ns)):
                if not ns:  # host NICs send unshaped: what is shaped is the fabric's
                    self._tbf(dev, ns)
            return
        # xdp: west end - veth - link end x ... mirred ... link end y - veth - east end
        x, y = f"{p}l{i}x", f"{p}l{i}y"
        self._veth(w_end, x, stack, w_ns)
        self._veth(e_end, y, stack, e_ns)
        for src, dst in ((x, y), (y, x)):
            sh("tc", "qdisc", "add", "dev", src, "handle", "ffff:", "ingress")
            sh("tc", "filter", "add", "dev", src, "parent", "ffff:", "protocol", "all",
               "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect",
               "dev", dst)  # no cls_matchall on every kernel: u32 matching everything
            self._tbf(dst, "")

    def _tbf(self, dev: str, ns: str) -> None:
        sh("tc", *(["-n", ns] if ns else []), "qdisc", "add", "dev", dev, "root", "tbf",
           "rate", f"{LINK_MBPS}mbit", "burst", "32kb", "latency", "50ms")
        self.shaped.append(dev)

    def errors(self, bridges: list[str] | None = None) -> list[str]:
        inst = self.daemons.instances[0]
        out = []
        for br in bridges or self.bridges:
            for port in self.ports[br]:
                err = self.daemons.vsctl(inst, ["get", "interface", port, "error"]).strip()
                if err and err != "[]":
                    out.append(f"{port}: {err}")
        return out

    def ping(self, seconds: float) -> dict:
        count = int(seconds * 100)
        c0, t0 = cpu_s(self.pid), time.monotonic()
        out = sh("ip", "netns", "exec", self.ns[0], "ping", "-n", "-q", "-i", "0.01", "-c",
                 str(count), "-w", str(int(seconds) + 5), "10.9.0.2", check=False)
        cpu, wall = cpu_s(self.pid) - c0, time.monotonic() - t0
        got = int(re.search(r"(\d+) received", out).group(1)) if "received" in out else 0
        rtt = re.search(r"= ([\d.]+)/([\d.]+)/([\d.]+)", out)
        forwardings = 2 * got * SWITCHES
        return {"replies": got, "sent": count, "cpu_cores": round(cpu / wall, 3),
                "us_per_forwarding": round(cpu / forwardings * 1e6, 1) if forwardings else None,
                "rtt_avg_ms": float(rtt.group(2)) if rtt else None}

    def udp(self, seconds: float) -> float:
        server = subprocess.Popen(["ip", "netns", "exec", self.ns[1], "iperf3", "-s", "-1",
                                   "-B", "10.9.0.2", "-J"], stdout=subprocess.PIPE, text=True)
        time.sleep(0.5)
        client = subprocess.run(["ip", "netns", "exec", self.ns[0], "iperf3", "-c",
                                 "10.9.0.2", "-u", "-b", f"{3 * LINK_MBPS}M", "-l", str(UDP_BYTES),
                                 "-t", str(int(seconds))], capture_output=True, text=True)
        try:
            out, _ = server.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.communicate()
            print(f"  udp: the server got nothing ({client.stderr.strip()[-200:]})")
            return 0.0
        try:
            got = json.loads(out)["end"]["sum"]  # iperf3 3.12's UDP server: bytes 0
            received = got["packets"] - got["lost_packets"]  # packets: the highest sequence
            return round(received * UDP_BYTES * 8 / got["seconds"] / 1e6, 1)
        except (ValueError, KeyError):
            print(f"  udp: no rate in the server's report ({out[-300:]!r}; client: "
                  f"{client.stdout[-200:]!r} {client.stderr[-200:]!r})")
            return 0.0


#: ``dpdk``: Debian's ovs-vswitchd built with DPDK 22.11 (openvswitch-switch-dpdk, with
#: the librte-net-af-packet23 and librte-mempool-ring23 drivers), on anonymous memory
DPDK_VSWITCHD = Path("/usr/lib/openvswitch-switch-dpdk/ovs-vswitchd-dpdk")
DPDK_MEMORY_MB = 256


def ring_args(mtu: int) -> str:
    """The af_packet driver's rings for frames of ``mtu`` (a slot holds the frame, a VLAN
    tag and the driver's 32-byte header), about 1 MB each.

    >>> ring_args(1500)
    'framesz=2048,blocksz=4096,framecnt=512'
    """
    framesz = max(2048, -(-(mtu + 18 + 32 + 256) // 64) * 64)
    blocksz = 4096
    while blocksz < 4 * framesz and framesz > 2048:
        blocksz *= 2
    per_block = blocksz // framesz
    framecnt = max(per_block, (1 << 20) // (per_block * framesz) * per_block)
    return f"framesz={framesz},blocksz={blocksz},framecnt={framecnt}"


def _wait(cond, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return False


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--maxsleep", type=int, default=200, help="pmd-maxsleep, us")
    ap.add_argument("--ways", default="packet,xdp")
    ap.add_argument("--mtu", type=int, default=1500, help="every veth's MTU")
    args = ap.parse_args(argv)
    rows = {}
    for way in args.ways.split(","):
        if way == "dpdk" and not DPDK_VSWITCHD.exists():
            print(f"dpdk: {DPDK_VSWITCHD} not found: apt install openvswitch-switch-dpdk "
                  "librte-net-af-packet23 librte-mempool-ring23")
            continue
        with ExitStack() as stack:
            try:
                chain = Chain(way, stack, args.maxsleep, args.mtu)
            except PortError as exc:
                print(f"{way}: {exc}")
                continue
            time.sleep(2.0)
            errors = chain.errors()
            if errors:
                print(f"{way}: port errors: {errors}")
                continue
            chain.ping(1.0)  # warm up (ARP, caches)
            idle0, t0 = cpu_s(chain.pid), time.monotonic()
            time.sleep(2.0)
            idle = (cpu_s(chain.pid) - idle0) / (time.monotonic() - t0)
            light = chain.ping(args.seconds)
            print(f"  {way}: {json.dumps(light)}", flush=True)
            shaped = chain.udp(3)
            rows[way] = {**light, "idle_cores": round(idle, 3), "udp_through_mbps": shaped}
            print(way, json.dumps(rows[way]), flush=True)
    if {"packet", "xdp"} <= set(rows) and rows["xdp"]["us_per_forwarding"]:
        ratio = rows["packet"]["us_per_forwarding"] / rows["xdp"]["us_per_forwarding"]
        print(f"light load, CPU per forwarding: packet / xdp = {ratio:.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
