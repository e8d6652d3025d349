"""The phantom-queue rules in the kernel, frame by frame: thresholds and joint counting.

A veth pair in a throw-away namespace carries the ruleset of :mod:`testbed.fabric.phantom` on
one end, for a 1 Mb/s link (the buckets drain 119 bytes a millisecond, a quantum in
4 ms). Bursts of 4160-byte frames (8 or 9 quanta each), sent back to back through a
packet socket as ovs-vswitchd sends, fill the buckets far faster than they drain, so
the frame at which marking starts says where the threshold is. Marks are read from the
table's counters.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from controllers.config import EcnClass
from testbed.fabric import phantom
from testbed.host.naming import new_run_id, run_prefix

pytestmark = pytest.mark.root

FRAME = 4160
SENDER = r"""
import json, socket, struct, sys
ifname, frames = sys.argv[1], json.loads(sys.argv[2])  # [[tos, udp dport], ...]
iplen = {frame} - 14


def frame(tos, dport):
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, tos, iplen, 0, 0, 64, 17, 0,
                     bytes([10, 9, 0, 1]), bytes([10, 9, 0, 2]))
    s = sum(struct.unpack("!10H", ip))
    s = (s & 0xFFFF) + (s >> 16)
    ip = ip[:10] + struct.pack("!H", ~s & 0xFFFF) + ip[12:]
    udp = struct.pack("!HHHH", 40000, dport, iplen - 20, 0)
    return b"\xff" * 6 + b"\x02\x00\x00\x00\x00\x01\x08\x00" + ip + udp + bytes(iplen - 28)


built = [frame(tos, dport) for tos, dport in frames]  # built first: sent back to back
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
sock.bind((ifname, 0))
for f in built:
    sock.send(f)
""".replace("{frame}", str(FRAME))


@pytest.fixture
def veth():
    """(namespace, device with the hook); the namespace and all in it go at the end."""
    if subprocess.run(["which", "nft"], capture_output=True).returncode:
        pytest.skip("nftables (nft) is missing")
    prefix = run_prefix(new_run_id())
    ns, dev = f"{prefix}pq", f"{prefix}pqa"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    try:
        run = ["ip", "-n", ns, "link"]
        subprocess.run([*run, "add", dev, "type", "veth", "peer", "name", f"{prefix}pqb"],
                       check=True)
        for name in (dev, f"{prefix}pqb"):
            subprocess.run([*run, "set", name, "mtu", "9000", "up"], check=True)
        yield ns, dev
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)


def load(ns: str, dev: str, classes: dict[str, EcnClass]) -> str:
    table = f"{dev}ecn"
    text = phantom.ruleset(table, [phantom.Port(dev, 1)], classes, drain=0.95)
    subprocess.run(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=text, text=True,
                   check=True)
    return table


ECT_ROCE, PLAIN_ROCE, ECT_OTHER = [2, 4791], [0, 4791], [2, 5001]


def burst(ns: str, dev: str, frames: list[list[int]]) -> None:
    """Send ``frames`` ([TOS, UDP destination port] each) back to back out of ``dev``."""
    subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", SENDER, dev,
                    json.dumps(frames)], check=True)


def marks(ns: str, table: str) -> int:
    done = subprocess.run(["ip", "netns", "exec", ns, "nft", "-j", "list", "counters",
                           "table", "netdev", table], capture_output=True, text=True,
                          check=True)
    return sum(m.get("collective", 0) for m in phantom.marks_from_json(done.stdout,
                                                                      table).values())


def test_max_threshold_marks_every_frame_beyond_it(veth):
    """max 18.5 KB = 36 quanta: four frames (32-36 quanta) pass, the fifth does not fit;
    from there the bucket is empty and every frame is marked; min never marks (p = 0)."""
    ns, dev = veth
    assert phantom.quanta(18.5) == 36
    table = load(ns, dev, {"collective": EcnClass(min_kb=10, max_kb=18.5, probability=0.0)})
    burst(ns, dev, [ECT_ROCE] * 10)
    assert marks(ns, table) == 6


def test_min_threshold_marks_with_its_probability(veth):
    """min 10 KB = 20 quanta with probability 1: two frames (16-18 quanta) pass, the
    rest are marked."""
    ns, dev = veth
    table = load(ns, dev, {"collective": EcnClass(min_kb=10, max_kb=60, probability=1.0)})
    burst(ns, dev, [ECT_ROCE] * 10)
    assert marks(ns, table) == 8


def test_every_frame_counts_but_only_ect_of_the_class_is_marked(veth):
    """Not-ECT RoCE frames and ECT frames to another UDP port (no class) fill the
    phantom queue past max and are not marked; the ECN-capable RoCE frames that follow
    are (alone, four of those would pass, as in the test above)."""
    ns, dev = veth
    table = load(ns, dev, {"collective": EcnClass(min_kb=10, max_kb=18.5, probability=0.0)})
    burst(ns, dev, [PLAIN_ROCE, PLAIN_ROCE, ECT_OTHER, ECT_OTHER, PLAIN_ROCE, ECT_OTHER,
                    ECT_ROCE, ECT_ROCE])
    assert marks(ns, table) == 2
    listing = json.loads(subprocess.run(
        ["ip", "netns", "exec", ns, "nft", "-j", "list", "table", "netdev", table],
        capture_output=True, text=True, check=True).stdout)
    assert any("limit" in item for item in listing["nftables"])
