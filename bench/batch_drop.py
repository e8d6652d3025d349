"""Probe: a tail drop in one class of a switch port makes ovs-vswitchd (userspace datapath)
discard the rest of the frames it was sending out of that port, frames of other classes
included, and no queue counts them.

One private ovs-vswitchd (:class:`testbed.fabric.switchd.SwitchDaemons`; the host's Open vSwitch
is not touched), one bridge between two namespaces. The egress of the port towards the
receiver has two HTB classes, as the lab's traffic classes do: a lossy one (UDP port 9)
and a RoCE one (UDP port 4791) with room for everything. The sender sends pairs (a lossy
frame, a RoCE frame) in bursts of 8 pairs, 3 ms apart, so ovs-vswitchd reads and sends
them in batches. Three ways:

- ``overflow``: the lossy class is slow (2 Mb/s) with a 20 KB FIFO, so it tail-drops;
- ``room``: the lossy class as fast and deep as the RoCE one (nothing drops);
- ``head-drop``: as ``overflow``, but the lossy class's queue is a head-drop FIFO of as
  many frames (``pfifo_head_drop``): when full it drops its oldest frame and takes the
  new one, and tells the sender "congested" (NET_XMIT_CN), not "dropped" (NET_XMIT_DROP,
  which sendmmsg reports as ENOBUFS), so ovs-vswitchd goes on sending its batch.

For each: RoCE frames sent and received, the RoCE class's drops, the frames the switch
read (``dpif-netdev/pmd-stats-show``) and the frames the port's queue took (sent, dropped, held):
their difference is :mod:`testbed.fabric.drops`' ``switch_unsent``.

    python -m bench.batch_drop [--pairs 3000]

Measured on a virtual machine with 2 cores of an Intel Xeon at 2.6 GHz (kernel 6.18,
Open vSwitch 3.1), the three ways in one run, 3,000 pairs:

| way | RoCE received | RoCE class drops | lossy received | switch read | queue took | unsent |
|---|---|---|---|---|---|---|
| overflow | 259 of 3,000 | 0 | 255 | 6,008 | 1,138 | 4,870 |
| room | 3,000 of 3,000 | 0 | 3,000 | 6,008 | 6,008 | 0 |
| head-drop | 3,000 of 3,000 | 0 | 252 | 6,008 | 6,008 | 0 |

The lab's lossy classes keep their byte FIFOs: a head-drop queue counts frames, so a
lossy class of 64 KB became 7 jumbo frames, and in ``testbed run lossless`` (one run
each, side by side) the agent chains' p99 went from 427-443 ms to 1,220-1,282 ms with
classes, while no RoCE packet was lost (three seeds of the PFC test).

Exits 1 when the RoCE class loses frames it never dropped and ``switch_unsent`` does not
count at least as many (the lab would lose frames silently). Not in ``make bench``: a
probe of a defect of the switch, recorded in the docs' troubleshooting page.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import shutil
import subprocess
import sys
import time
from contextlib import ExitStack

from testbed.fabric import drops
from testbed.fabric.switchd import SwitchDaemons
from testbed.host.naming import claim, forget, new_run_id, register, run_prefix
from testbed.host.netlink import QueueReader

OFFLOADS = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"]
LOSSY_PORT, ROCE_PORT = 9, 4791
#: way -> the lossy class's rate and leaf (20 KB: 16 of the 1,242-byte frames)
WAYS = {"overflow": ("2mbit", ["bfifo", "limit", "20000"]),
        "room": ("500mbit", ["bfifo", "limit", "40000000"]),
        "head-drop": ("2mbit", ["pfifo_head_drop", "limit", "16"])}

RECEIVER = """
import select, socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.setsockopt(socket.SOL_SOCKET, 33, 64 << 20)
s.bind((sys.argv[1], 0))
print("ready", flush=True)
counts, end, last = {}, time.time() + float(sys.argv[2]), None
while time.time() < end:  # the limit, or a second with nothing after the first frame
    if not select.select([s], [], [], 0.2)[0]:
        if last is not None and time.time() - last > 1.0:
            break
        continue
    last = time.time()
    f = s.recv(10000)
    if len(f) > 40 and f[12:14] == b"\\x08\\x00" and f[23] == 17:
        port = struct.unpack("!H", f[36:38])[0]
        counts[port] = counts.get(port, 0) + 1
print(counts, flush=True)
"""

SENDER = """
import socket, struct, sys, time
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
s.setsockopt(socket.SOL_SOCKET, 32, 64 << 20)
s.bind((sys.argv[1], 0))
def frame(port, size=1200):
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 28 + size, 0, 0, 64, 17, 0,
                     bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return (bytes.fromhex("020000000002020000000001") + b"\\x08\\x00" + ip
            + struct.pack("!HHHH", 5000, port, 8 + size, 0) + bytes(size))
lossy, roce = frame(int(sys.argv[3])), frame(int(sys.argv[4]))
for i in range(int(sys.argv[2])):
    s.send(lossy)
    s.send(roce)
    if i % 8 == 7:
        time.sleep(0.003)
"""


def sh(*argv: str, check: bool = True) -> str:
    done = subprocess.run(argv, capture_output=True, text=True)
    if check and done.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def measure(way: str, pairs: int) -> dict:
    """One bridge, one way: what arrived, what the queue counted, what the switch read."""
    rate, leaf = WAYS[way]
    rid = new_run_id()
    p = run_prefix(rid)
    with ExitStack() as stack:
        ns = {"a": p + "na", "b": p + "nb"}
        for name in ns.values():
            sh("ip", "netns", "add", name)
            register(rid, "netns", name)
            stack.callback(lambda n=name: (sh("ip", "netns", "del", n, check=False),
                                           forget(rid, "netns", n)))
        for side in "ab":
            host, port = p + "h" + side, p + "p" + side
            sh("ip", "link", "add", port, "type", "veth", "peer", "name", host)
            register(rid, "link", port)
            stack.callback(lambda d=port: (sh("ip", "link", "del", d, check=False),
                                           forget(rid, "link", d)))
            for dev in (host, port):
                sh("ip", "link", "set", dev, "mtu", "9000")
                sh("ethtool", "-K", dev, *OFFLOADS, check=False)
            sh("ip", "link", "set", host, "netns", ns[side])
            # no IPv6 on either end: a host's own router solicitations would reach the
            # switch, match no flow and count as frames read that no queue took
            sh("ip", "netns", "exec", ns[side], "sysctl", "-qw",
               f"net.ipv6.conf.{host}.disable_ipv6=1")
            sh("sysctl", "-qw", f"net.ipv6.conf.{port}.disable_ipv6=1")
            sh("ip", "-n", ns[side], "link", "set", host, "up")
            sh("ip", "link", "set", port, "up")
        run = claim(rid)
        stack.callback(lambda: shutil.rmtree(run, ignore_errors=True))
        bridge = p + "s0"
        daemons = SwitchDaemons([[bridge]], folder=run / "switch")
        stack.callback(daemons.stop)
        daemons.start()
        inst = daemons.instances[0]
        daemons.vsctl(inst, ["add-br", bridge, "--", "set", "bridge", bridge,
                             "datapath_type=dummy", "protocols=OpenFlow13", "fail_mode=secure",
                             "--", "add-port", bridge, p + "pa", "--", "add-port", bridge,
                             p + "pb"])
        time.sleep(1.0)
        sh("ovs-ofctl", "-O", "OpenFlow13", "add-flow", daemons.mgmt(bridge),
           f"in_port={p}pa,actions=output:{p}pb")
        out = p + "pb"  # its egress: the lossy class (default) and the RoCE class
        sh("tc", "qdisc", "add", "dev", out, "root", "handle", "1:", "htb", "default", "10")
        for minor, crate in ((10, rate), (20, "500mbit")):
            sh("tc", "class", "add", "dev", out, "parent", "1:", "classid", f"1:{minor}", "htb",
               "rate", crate, "burst", "200k")
        sh("tc", "qdisc", "add", "dev", out, "parent", "1:10", "handle", "10:", *leaf)
        sh("tc", "qdisc", "add", "dev", out, "parent", "1:20", "handle", "20:", "bfifo",
           "limit", "40000000")
        sh("tc", "filter", "add", "dev", out, "parent", "1:", "protocol", "ip", "prio", "1",
           "u32", "match", "ip", "dport", str(ROCE_PORT), "0xffff", "flowid", "1:20")
        reader = QueueReader([out])
        stack.callback(reader.close)
        ctls = [str(inst.ctl)]
        got0, took0 = drops.received(ctls), drops.switch_intake(reader.read())[0]
        receiver = subprocess.Popen(["ip", "netns", "exec", ns["b"], sys.executable, "-c",
                                     RECEIVER, p + "hb", "6"], stdout=subprocess.PIPE,
                                    text=True)
        receiver.stdout.readline()
        sh("ip", "netns", "exec", ns["a"], sys.executable, "-c", SENDER, p + "ha", str(pairs),
           str(LOSSY_PORT), str(ROCE_PORT))
        counts = ast.literal_eval(receiver.communicate(timeout=30)[0].strip())
        got, took = drops.received(ctls) - got0, drops.switch_intake(reader.read())[0] - took0
        classes = sh("tc", "-s", "class", "show", "dev", out)
        roce_drops = int(re.search(r"class htb 1:20 .*\n.*?dropped (\d+)", classes).group(1))
    return {"way": way, "roce_sent": pairs, "roce_received": counts.get(ROCE_PORT, 0),
            "lossy_received": counts.get(LOSSY_PORT, 0), "roce_class_drops": roce_drops,
            "switch_read": got, "queue_took": took, "unsent": max(0, got - took)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=3000)
    ap.add_argument("--ways", default=",".join(WAYS), help=f"of {', '.join(WAYS)}")
    args = ap.parse_args(argv)
    failed = False
    for way in args.ways.split(","):
        row = measure(way, args.pairs)
        print(json.dumps(row), flush=True)
        missing = row["roce_sent"] - row["roce_received"] - row["roce_class_drops"]
        if missing > row["unsent"]:
            print(f"MISS {way}: {missing} RoCE frames lost that no counter of the lab saw")
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
