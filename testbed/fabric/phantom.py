"""Per-packet ECN marking by a phantom queue (HULL) in the switches' egress path.

Kernels without RED (this one) cannot mark CE in a qdisc, and the controller's marking
reacts once per telemetry sample, after a 64 KB queue has long filled. Here every
switch port gets, in one nftables ``netdev`` table per fabric, an egress hook on the
port device (Open vSwitch's userspace datapath sends through packet sockets, which pass
it) and *phantom queues*: token buckets that drain at ``drain`` x the link rate and
count every byte leaving the port. When a phantom queue is over a threshold, ECN-capable
packets of the class it serves leave with CE. The phantom queue drains slower than the
link, so it marks before the real queue (HTB + bfifo) builds (Alizadeh et al., "Less is
More", NSDI 2012).

Thresholds per class are RED-like (``min_kb``, ``max_kb``, ``probability``): above
``max_kb`` every ECT packet is marked, above ``min_kb`` each with ``probability``.
Classes as in :mod:`controllers.ecn`: ``collective`` is UDP 4791, ``agents`` is TCP.

Why packets are counted in quanta: an nftables ``limit`` object in byte mode holds
``rate x 1 s + burst`` bytes (the kernel's ``tokens_max = unit * (rate + burst) /
rate``), a second of link rate, so it can never stand for a queue of a few KB. In
packet mode its bucket is exactly ``burst`` packets; so one "packet" of a bucket is a
quantum of :data:`QUANTUM` bytes, and a frame of length L evaluates the bucket about
L / QUANTUM times. The count is drawn per frame, unbiased: a map on (frame length,
random number) gives floor(L/Q) or floor(L/Q) + 1 with the right probability (a frame
shorter than a quantum may count 0 and is then neither counted nor marked).

Per port and distinct threshold there is one bucket (``limit`` object, burst = the
threshold in quanta), and every frame leaving the port evaluates every bucket of the
port, whatever its class and ECN codepoint, so the phantom queue counts all bytes.
A bucket that cannot give the frame's quanta is over its threshold: a flag bit in the
packet mark records it (bits 8 and up; bits 0-7 carry the frame's quanta), and the
marking rules read the flags. The mark is reset to 0 before the frame leaves.
"""

from __future__ import annotations

import json
import math
import subprocess
from collections.abc import Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass

from controllers.config import CLASSES, EcnClass
from testbed.errors import BringUpError
from testbed.host.hosts import RootHost
from testbed.host.naming import forget, register, run_id_of
from topologies.spec import FabricSpec

#: bytes per token of a phantom queue
QUANTUM = 512
#: random levels per quantum for the unbiased quantum count (length bins of Q/LEVELS)
LEVELS = 16
BIN = QUANTUM // LEVELS
#: probability resolution of the min-threshold marks
PROBABILITY_SCALE = 1000
#: a frame's quanta live in the low byte of the packet mark, bucket flags above
QUANTA_MASK = 0xFF
FLAG_SHIFT = 8
#: frame bytes beyond the MTU that a port can send (Ethernet header and a VLAN tag)
L2_OVERHEAD = 18
MATCH = {"collective": "udp dport 4791 ip ecn != not-ect",
         "agents": "ip protocol tcp ip ecn != not-ect"}


@dataclass(frozen=True)
class Port:
    """A switch port that gets a phantom queue: its device and its link rate."""

    ifname: str
    mbps: float


def switch_ports(spec: FabricSpec) -> list[Port]:
    """Every switch port of ``spec`` (each has an egress queue): the switch end of every
    host link, and both ends of every fabric link, each at its link's rate.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", planes=1, nodes=2, leaves_per_plane=1,
    ...                     spines_per_plane=1, link_mbps=20, oversubscription=2)
    >>> [(p.ifname, p.mbps) for p in switch_ports(spec)]  # doctest: +NORMALIZE_WHITESPACE
    [('tbdoc0p0l0e1', 20.0), ('tbdoc0p0l0e2', 20.0), ('tbdoc0p0s0e1', 20.0),
     ('tbdoc0p0l0e3', 20.0)]
    """
    return [Port(p.ifname, p.mbps) for p in spec.switch_ports()]


def quanta(kb: float) -> int:
    """A threshold in KB (1000 bytes) as a bucket depth in quanta, at least one.

    >>> quanta(20), quanta(8), quanta(0.1)
    (39, 16, 1)
    """
    return max(1, round(kb * 1000 / QUANTUM))


def drain_rate(mbps: float, drain: float) -> int:
    """Quanta per second that a port's phantom queues drain: ``drain`` x the link rate.

    >>> drain_rate(20, 0.95)  # 0.95 * 20 Mb/s = 2.375 MB/s
    4639
    """
    return max(1, round(drain * mbps * 1e6 / 8 / QUANTUM))


def depths(classes: Mapping[str, EcnClass]) -> list[int]:
    """The distinct bucket depths (quanta) that the classes' thresholds need, sorted.

    >>> depths({"collective": EcnClass(min_kb=8, max_kb=24, probability=0.5),
    ...         "agents": EcnClass(min_kb=20, max_kb=60, probability=0.1)})
    [16, 39, 47, 117]
    """
    return sorted({quanta(kb) for th in classes.values() for kb in (th.min_kb, th.max_kb)})


def max_quanta(mtu: int) -> int:
    """Quanta of the longest frame a port sends.

    >>> max_quanta(9000), max_quanta(1500)
    (18, 3)
    """
    return math.ceil((mtu + L2_OVERHEAD) / QUANTUM)


def quanta_elements(mtu: int) -> list[str]:
    """Elements of the (frame length . random level) -> quanta map.

    A length bin of :data:`BIN` bytes with midpoint m holds floor(m/Q) quanta plus one
    more for the first round(LEVELS * frac(m/Q)) of the LEVELS random levels, so the
    expected count is m/Q. Frames longer than the MTU count as the longest.

    >>> quanta_elements(1500)[:3]
    ['0-31 . 0-15 : 0', '32-63 . 0-1 : 1', '32-63 . 2-15 : 0']
    >>> quanta_elements(1500)[-1]
    '1536-65535 . 0-15 : 3'
    """
    top = LEVELS - 1
    out = []
    longest = max_quanta(mtu) * QUANTUM
    for lo in range(0, longest, BIN):
        hi = lo + BIN - 1
        whole, frac = divmod(lo + BIN / 2, QUANTUM)
        up = round(frac / QUANTUM * LEVELS)
        if up > 0:
            out.append(f"{lo}-{hi} . 0-{up - 1} : {int(whole) + 1}")
        if up < LEVELS:
            out.append(f"{lo}-{hi} . {up}-{top} : {int(whole)}")
    out.append(f"{longest}-65535 . 0-{top} : {max_quanta(mtu)}")
    return out


def flag(index: int) -> int:
    """Mark bit set when the bucket of depth index ``index`` is over its threshold."""
    return 1 << (FLAG_SHIFT + index)


def _port_rules(port: Port, classes: Mapping[str, EcnClass], drain: float,
                kmax: int) -> list[str]:
    p = port.ifname
    levels = depths(classes)
    lines = [f" limit {p}_d{d} {{ rate {drain_rate(port.mbps, drain)}/second burst {d} packets }}"
             for d in levels]
    lines += [f" counter {p}_{cls} {{ }}" for cls in classes]
    lines += [f" chain {p} {{",
              f"  type filter hook egress device \"{p}\" priority 0; policy accept;",
              f"  meta mark set meta length . numgen random mod {LEVELS} map @quanta"]
    for d in levels:
        jumps = ", ".join(f"{n} : jump {p}_d{d}_{n}" for n in range(1, kmax + 1))
        lines.append(f"  meta mark & {QUANTA_MASK:#x} vmap {{ {jumps} }}")
    for cls, th in classes.items():
        i_max, i_min = levels.index(quanta(th.max_kb)), levels.index(quanta(th.min_kb))
        lines.append(f"  {MATCH[cls]} meta mark & {flag(i_max):#x} != 0 goto {p}_{cls}")
        prob = round(th.probability * PROBABILITY_SCALE)
        if prob > 0:
            draw = (f" numgen random mod {PROBABILITY_SCALE} < {prob}"
                    if prob < PROBABILITY_SCALE else "")
            lines.append(f"  {MATCH[cls]} meta mark & {flag(i_min):#x} != 0{draw} "
                         f"goto {p}_{cls}")
    lines += ["  meta mark set 0", " }"]
    for cls in classes:
        lines.append(f" chain {p}_{cls} {{ meta mark set 0 counter name \"{p}_{cls}\" "
                     "ip ecn set ce; }")
    for i, d in enumerate(levels):
        for n in range(1, kmax + 1):
            takes = " ".join([f"limit name \"{p}_d{d}\""] * n)
            lines.append(f" chain {p}_d{d}_{n} {{ {takes} return; "
                         f"meta mark set meta mark | {flag(i):#x}; }}")
    return lines


def ruleset(table: str, ports: Sequence[Port], classes: Mapping[str, EcnClass], *,
            drain: float = 0.95, mtu: int = 9000) -> str:
    """The nftables table (``nft -f`` input) with a phantom queue on every port.

    >>> text = ruleset("tb1a2becn", [Port("tb1a2bp0l0e1", 20)],
    ...                {"collective": EcnClass(min_kb=8, max_kb=24, probability=0.5)}, mtu=1500)
    >>> print("\\n".join(line for line in text.splitlines()
    ...                  if "elements" not in line and "limit name" not in line))
    table netdev tb1a2becn {
     map quanta { typeof meta length . numgen random mod 16 : meta mark; flags interval;
     limit tb1a2bp0l0e1_d16 { rate 4639/second burst 16 packets }
     limit tb1a2bp0l0e1_d47 { rate 4639/second burst 47 packets }
     counter tb1a2bp0l0e1_collective { }
     chain tb1a2bp0l0e1 {
      type filter hook egress device "tb1a2bp0l0e1" priority 0; policy accept;
      meta mark set meta length . numgen random mod 16 map @quanta
      meta mark & 0xff vmap { 1 : jump tb1a2bp0l0e1_d16_1, 2 : jump tb1a2bp0l0e1_d16_2, 3 : jump tb1a2bp0l0e1_d16_3 }
      meta mark & 0xff vmap { 1 : jump tb1a2bp0l0e1_d47_1, 2 : jump tb1a2bp0l0e1_d47_2, 3 : jump tb1a2bp0l0e1_d47_3 }
      udp dport 4791 ip ecn != not-ect meta mark & 0x200 != 0 goto tb1a2bp0l0e1_collective
      udp dport 4791 ip ecn != not-ect meta mark & 0x100 != 0 numgen random mod 1000 < 500 goto tb1a2bp0l0e1_collective
      meta mark set 0
     }
     chain tb1a2bp0l0e1_collective { meta mark set 0 counter name "tb1a2bp0l0e1_collective" ip ecn set ce; }
    }
    >>> [line for line in text.splitlines() if "_d16_2 {" in line]
    [' chain tb1a2bp0l0e1_d16_2 { limit name "tb1a2bp0l0e1_d16" limit name "tb1a2bp0l0e1_d16" return; meta mark set meta mark | 0x100; }']
    """  # noqa: E501
    kmax = max_quanta(mtu)
    lines = [f"table netdev {table} {{",
             f" map quanta {{ typeof meta length . numgen random mod {LEVELS} : meta mark; "
             "flags interval;",
             f"  elements = {{ {', '.join(quanta_elements(mtu))} }} }}"]
    for port in ports:
        lines += _port_rules(port, classes, drain, kmax)
    lines.append("}")
    return "\n".join(lines) + "\n"


def table_name(prefix: str) -> str:
    """The run's phantom-queue table: the run prefix plus ``ecn``.

    >>> table_name("tb1a2b")
    'tb1a2becn'
    """
    return f"{prefix}ecn"


def _nft(args: list[str], stdin: str | None = None) -> subprocess.CompletedProcess:
    return RootHost().run(["nft", *args], timeout=60, stdin=stdin)


def remove(table: str) -> None:
    """Delete the table (a table already gone is fine) and its registration."""
    _nft(["delete", "table", "netdev", table])
    run_id = run_id_of(table)
    if run_id is not None:
        forget(run_id, "nft", f"netdev {table}")


def install(spec: FabricSpec, classes: Mapping[str, EcnClass], drain: float,
            stack: ExitStack) -> str:
    """Load the phantom queues of every switch port of ``spec``; removal goes on ``stack``.

    Returns the table's name. The ports must exist (an egress hook binds to a device).
    """
    table = table_name(spec.prefix)
    text = ruleset(table, switch_ports(spec), classes, drain=drain, mtu=spec.mtu)
    done = _nft(["-f", "-"], text)
    if done.returncode:
        remove(table)
        raise BringUpError(f"nftables phantom queues ({table}): "
                           f"{done.stderr.strip().splitlines()[0][:300]}")
    register(run_id_of(spec.prefix), "nft", f"netdev {table}")
    stack.callback(remove, table)
    return table


def read_marks(table: str) -> dict[str, dict[str, int]]:
    """CE marks so far per port and class, from the table's counters (``nft -j``).

    Returns ``{ifname: {class: packets}}``; empty if the table is gone.
    """
    done = _nft(["-j", "list", "counters", "table", "netdev", table])
    return marks_from_json(done.stdout, table) if done.returncode == 0 else {}


def marks_from_json(text: str, table: str) -> dict[str, dict[str, int]]:
    """The marking counters of ``table`` in ``nft -j list counters`` output.

    >>> marks_from_json('{"nftables": [{"metainfo": {}}, {"counter": {"family": "netdev", '
    ...                 '"name": "tb1a2bp0l0e3_agents", "table": "tb1a2becn", "handle": 9, '
    ...                 '"packets": 7, "bytes": 700}}]}', "tb1a2becn")
    {'tb1a2bp0l0e3': {'agents': 7}}
    """
    marks: dict[str, dict[str, int]] = {}
    for item in json.loads(text or "{}").get("nftables", []):
        counter = item.get("counter")
        if not counter or counter.get("table") != table:
            continue
        ifname, _, cls = counter["name"].rpartition("_")
        if cls in CLASSES:
            marks.setdefault(ifname, {})[cls] = counter["packets"]
    return marks


def summary(marks: Mapping[str, Mapping[str, int]], roles: Mapping[str, str],
            drain: float, prefix: str = "") -> dict:
    """The ``runs[i].ecn`` entry: marks per class, per port role and per marking port
    (named without the run ``prefix``, so that seeds line up port by port).

    >>> summary({"tb1a2bp0l0e3": {"collective": 5, "agents": 1},
    ...          "tb1a2bp0l0e1": {"collective": 0, "agents": 0}},
    ...         {"tb1a2bp0l0e3": "leaf_uplink", "tb1a2bp0l0e1": "leaf_downlink"}, 0.95,
    ...         prefix="tb1a2b")
    ... # doctest: +NORMALIZE_WHITESPACE
    {'backend': 'phantom', 'drain': 0.95, 'quantum_bytes': 512,
     'marked': {'collective': 5, 'agents': 1},
     'by_role': {'leaf_downlink': {'collective': 0, 'agents': 0},
                 'leaf_uplink': {'collective': 5, 'agents': 1}},
     'per_port': {'p0l0e3': {'collective': 5, 'agents': 1}}}
    """
    marked = {cls: sum(m.get(cls, 0) for m in marks.values()) for cls in CLASSES}
    by_role: dict[str, dict[str, int]] = {}
    for ifname, m in sorted(marks.items(), key=lambda kv: roles.get(kv[0], "")):
        role = by_role.setdefault(roles.get(ifname, "other"), dict.fromkeys(CLASSES, 0))
        for cls in CLASSES:
            role[cls] += m.get(cls, 0)
    per_port = {ifname.removeprefix(prefix): dict(m) for ifname, m in sorted(marks.items())
                if any(m.values())}
    return {"backend": "phantom", "drain": drain, "quantum_bytes": QUANTUM,
            "marked": marked, "by_role": by_role, "per_port": per_port}
