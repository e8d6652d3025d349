"""The path check: every equal-cost path between every pair of leaves, each pinned,
its one-way latency and loss measured with UDP probes.

For each ordered pair of leaves of a plane (switches with hosts), the paths are the
ones the controller spreads flows over (:func:`controllers.paths.next_hops`, without
the links the checks before excluded), one per choice of port at every switch on the
way. Each path gets a UDP port of its own, and every switch on it a flow (priority
above the controller's, the check's cookie) that sends probes to that port out of the
path's port; the last leaf delivers them by its own route. Probes go from a host
behind the first leaf (whose cable passed the checks before) to one behind the last,
all paths at once, round robin; both sockets are this process's, so a probe's one-way
time is read on one clock. The flows are removed afterwards.

Verdict: a path fails when it loses more than :data:`LOSS_MAX` of its probes, or when
its own one-way time (the 10th percentile of its probes') exceeds the median of its
pair's paths by more than :data:`SLACK_MS` and :data:`FACTOR` times that median. (The
first rule compared medians with the pair's fastest path and sent no warm-up probes;
on the healthy paths of ``rack-acceptance``'s 4-leaf fabric, seed 1, a software
switch's flow set-up and its momentary queues made 10 of 42, then 1 of 42, 1-2 ms
slower: the rule now takes the 10th percentile against the pair's median, after
:data:`WARMUP` uncounted probes a path; on seeds 2-4 one healthy path of 126 still
failed, 1.7 ms against 0.7.) A failing path is probed again alone and judged again
with that figure; that stands.
Failing paths are then explained (:func:`explain`): each link they share is measured
alone, both ways, with light frames (no queue: the wire's own time); a link whose
median exceeds the spec's delay by :data:`SLACK_MS`, or that loses more than
:data:`LOSS_MAX` of them, is named. Failures no link explains are put on the switches
between their end leaves (the spines of a leaf-spine): each such switch all of whose
paths failed is named. What is left is reported as unexplained, nothing excluded for
it (its leaves also carry passing paths, or are the only way between their hosts).
"""

from __future__ import annotations

import select
import socket
import statistics
import struct
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from controllers.paths import next_hops, port_map
from testbed.host import netns
from topologies.spec import FabricSpec, HostInterface, Link, link_name, short

#: the first path's UDP port (one a path); clear of the fault probes' (traffic.probe:
#: 47000 and up), which run beside a rack's acceptance during a run
PORT_BASE = 48000
COOKIE = 0xACCE55
PRIORITY = 60000
PROBES = 300
MAX_PPS = 4000  # all paths together
GRACE_S = 0.3
LOSS_MAX = 0.01
SLACK_MS = 1.0
FACTOR = 1.5
PROBE = struct.Struct("!4sHId")  # magic, path id, sequence number, send time
MAGIC = b"TBPA"
WARM = b"TBPW"  # a warm-up probe: not counted
WARMUP = 10
WARMUP_WAIT_S = 0.3


@dataclass
class Path:
    """One equal-cost path: its hops (switch, out port) from the first leaf to the last
    switch before the destination leaf, the links it crosses, its probe endpoints."""

    index: int
    plane: int
    src_leaf: str
    dst_leaf: str
    hops: tuple[tuple[str, int], ...]
    links: tuple[str, ...]
    src: HostInterface
    dst: HostInterface
    sent: int = 0
    delays: list[float] = field(default_factory=list)
    seqs: set[int] = field(default_factory=set)

    @property
    def port(self) -> int:
        return PORT_BASE + self.index

    def loss(self) -> float:
        return 1 - len(self.seqs) / self.sent if self.sent else 1.0

    def median_ms(self) -> float | None:
        return round(statistics.median(self.delays) * 1000, 3) if self.delays else None

    def base_ms(self) -> float | None:
        """The path's own time: the 10th percentile of its probes' (a queue that built
        for a moment in a software switch moves the median, not this)."""
        if not self.delays:
            return None
        ordered = sorted(self.delays)
        return round(ordered[len(ordered) // 10] * 1000, 3)


def _by_port(spec: FabricSpec) -> dict[tuple[str, int], Link]:
    out = {}
    for lk in spec.links:
        out[(lk.a, lk.a_port)] = lk
        out[(lk.b, lk.b_port)] = lk
    return out


def walks(spec: FabricSpec, src: str, dst: str,
          down: Sequence[tuple[str, str]] = ()) -> Iterator[list[tuple[str, int]]]:
    """Every equal-cost walk from switch ``src`` to ``dst``: (switch, out port) hops.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", nodes=4, leaves_per_plane=2, spines_per_plane=2)
    >>> [[(short(spec, s), p) for s, p in w] for w in walks(spec, "tbdoc0p0l0", "tbdoc0p0l1")]
    [[('p0l0', 3), ('p0s0', 2)], [('p0l0', 4), ('p0s1', 2)]]
    """
    hops, cabled = next_hops(spec, down), port_map(spec)

    def walk(here: str) -> Iterator[list[tuple[str, int]]]:
        if here == dst:
            yield []
            return
        for n in hops.get(dst, {}).get(here, []):
            for port in cabled[(here, n)]:
                for rest in walk(n):
                    yield [(here, port), *rest]
    yield from walk(src)


def plan(spec: FabricSpec, usable: Callable[[HostInterface], bool],
         down: Sequence[tuple[str, str]] = (),
         touching: set[str] | None = None) -> tuple[list[Path], list[str]]:
    """Every path of every ordered leaf pair (``touching``: the pairs with one of those
    leaves, a rack's), with its probe endpoints: the first host interface behind each
    leaf that ``usable`` allows (the destination's on another node: a node's own address
    never leaves it). Also the pairs left out (a leaf with no usable host)."""
    by_port = _by_port(spec)
    node = {i.name: h.name for h in spec.hosts for i in h.interfaces}
    paths: list[Path] = []
    skipped = []
    for plane in range(spec.planes):
        behind: dict[str, list[HostInterface]] = {}
        for intf in spec.interfaces(plane):
            behind.setdefault(intf.switch, []).append(intf)
        leaves = list(behind)
        for a in leaves:
            for b in leaves:
                if a == b or (touching is not None and a not in touching
                              and b not in touching):
                    continue
                src = next((i for i in behind[a] if usable(i)), None)
                dst = next((i for i in behind[b] if usable(i) and src is not None
                            and node[i.name] != node[src.name]), None)
                if src is None or dst is None:
                    skipped.append(f"{short(spec, a)}>{short(spec, b)}: no accepted host "
                                   f"behind {short(spec, a if src is None else b)}")
                    continue
                for w in walks(spec, a, b, down):
                    paths.append(Path(len(paths), plane, a, b, tuple(w),
                                      tuple(link_name(spec, by_port[h]) for h in w),
                                      src, dst))
    return paths, skipped


def flows(paths: Sequence[Path], deliver: bool = False) -> dict[str, list[str]]:
    """Per switch, the flows that pin the probes of every path through it (``deliver``:
    also the last leaf's, to the destination's port, where no route is yet)."""
    out: dict[str, list[str]] = {}
    for p in paths:
        hops = [*p.hops, (p.dst.switch, p.dst.switch_port)] if deliver else p.hops
        for switch, port in hops:
            out.setdefault(switch, []).append(
                f"cookie={COOKIE:#x},priority={PRIORITY},udp,nw_dst={p.dst.ip},"
                f"tp_dst={p.port},actions=output:{port}")
    return out


def pin(paths: Sequence[Path], ofctl: Callable[[str], str],
        deliver: bool = False) -> Callable[[], None]:
    """Install the paths' flows; return what removes them."""
    rules = flows(paths, deliver)

    def unpin() -> None:
        for switch in rules:
            subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "del-flows", ofctl(switch),
                            f"cookie={COOKIE:#x}/-1"], capture_output=True, timeout=30)
    try:
        for switch, lines in rules.items():
            subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "add-flows", ofctl(switch), "-"],
                           input="\n".join(lines) + "\n", text=True, check=True,
                           capture_output=True, timeout=30)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
        unpin()
        raise
    return unpin


def neighbours(paths: Sequence[Path], netns_of: Callable[[HostInterface], str]
               ) -> Callable[[], None]:
    """Each path's destination as a permanent neighbour of its source, until the
    returned call removes them: for a rack the controller does not route yet (its ARP
    rules are the controller's), the probes' own flows are the only way."""
    from pyroute2 import IPRoute

    made: list[tuple[HostInterface, str]] = []
    for p in paths:
        if (p.src, p.dst.ip) in made:
            continue

        def add(p: Path = p) -> None:
            with IPRoute() as ipr:
                index = ipr.link_lookup(ifname=p.src.name)[0]
                ipr.neigh("replace", dst=p.dst.ip, lladdr=p.dst.mac, ifindex=index,
                          state=0x80)  # NUD_PERMANENT
        netns.made_in(netns_of(p.src), add)
        made.append((p.src, p.dst.ip))

    def remove() -> None:
        for src, ip in made:
            def delete(src: HostInterface = src, ip: str = ip) -> None:
                with IPRoute() as ipr:
                    index = ipr.link_lookup(ifname=src.name)[0]
                    try:
                        ipr.neigh("del", dst=ip, ifindex=index)
                    except Exception:  # noqa: BLE001 (gone with its interface)
                        pass
            try:
                netns.made_in(netns_of(src), delete)
            except OSError:  # the host went
                pass
    return remove


def probe(paths: Sequence[Path], netns_of: Callable[[HostInterface], str],
          probes: int = PROBES) -> None:
    """Send ``probes`` on every path (round robin, :data:`MAX_PPS` in all) and read
    what arrives; fills each path's ``sent``, ``delays`` and ``seqs``."""
    def udp(intf: HostInterface, port: int) -> socket.socket:
        return netns.udp_socket(netns_of(intf), intf.name, intf.ip, port)

    rx = {p.index: udp(p.dst, p.port) for p in paths}
    by_index = {p.index: p for p in paths}  # a retest probes some paths of the plan
    tx = {}
    try:
        for p in paths:
            if p.src.name not in tx:
                tx[p.src.name] = udp(p.src, 0)
        by_fd = {s.fileno(): s for s in rx.values()}
        # first a few uncounted probes a path: a software switch sends a flow's first
        # packets through its slow path while it sets the flow up
        for k in range(WARMUP):
            for p in paths:
                try:
                    tx[p.src.name].sendto(PROBE.pack(WARM, p.index, k, 0.0), (p.dst.ip, p.port))
                except OSError:
                    pass
            time.sleep(len(paths) / MAX_PPS)
        time.sleep(WARMUP_WAIT_S)
        for s in rx.values():  # what arrived of them
            while True:
                try:
                    s.recv(2048)
                except (BlockingIOError, InterruptedError):
                    break
        gap = max(1, len(paths)) / MAX_PPS
        start = time.perf_counter()
        end_t = None
        seq = 0
        while True:
            now = time.perf_counter()
            if seq < probes and now >= start + seq * gap:
                for p in paths:
                    t = time.perf_counter()
                    try:
                        tx[p.src.name].sendto(PROBE.pack(MAGIC, p.index, seq, t),
                                              (p.dst.ip, p.port))
                    except OSError:  # its interface is down: the probe is lost
                        pass
                    p.sent += 1
                seq += 1
                continue
            if seq >= probes and end_t is None:
                end_t = now + GRACE_S
            if end_t is not None and now >= end_t:
                break
            wait = (start + seq * gap - now) if seq < probes else end_t - now
            ready, _, _ = select.select(list(by_fd.values()), [], [], max(0.0, wait))
            for s in ready:
                while True:
                    try:
                        data = s.recv(2048)
                    except (BlockingIOError, InterruptedError):
                        break
                    arrived = time.perf_counter()
                    if len(data) < PROBE.size:
                        continue
                    magic, index, n, t = PROBE.unpack_from(data)
                    p = by_index.get(index)
                    if magic != MAGIC or p is None:
                        continue
                    if n not in p.seqs:
                        p.seqs.add(n)
                        p.delays.append(arrived - t)
    finally:
        for s in [*rx.values(), *tx.values()]:
            s.close()


def judge(paths: Sequence[Path]) -> dict[int, str]:
    """Why each failing path fails (path index -> reason).

    >>> from topologies.spec import HostInterface as I
    >>> h = I("n0p0r0", 0, 0, "10.0.0.1", 24, "", "l0", 1)
    >>> fast = Path(0, 0, "l0", "l1", (), ("a",), h, h, 300, [0.0002] * 300, set(range(300)))
    >>> slow = Path(1, 0, "l0", "l1", (), ("b",), h, h, 300, [0.0052] * 300, set(range(300)))
    >>> lossy = Path(2, 0, "l0", "l1", (), ("c",), h, h, 300, [0.0002] * 290, set(range(290)))
    >>> fast2 = Path(3, 0, "l0", "l1", (), ("d",), h, h, 300, [0.0003] * 300, set(range(300)))
    >>> judge([fast, slow, lossy, fast2])
    {1: "5.2 ms one way (10th percentile), its pair's paths 0.2 ms", 2: '3.3 % of 300 probes lost'}
    """
    by_pair: dict[tuple[str, str], list[float]] = {}
    for p in paths:
        m = p.base_ms()
        if m is not None:
            by_pair.setdefault((p.src_leaf, p.dst_leaf), []).append(m)
    typical = {k: statistics.median(v) for k, v in by_pair.items()}
    out = {}
    for p in paths:
        why = []
        if p.loss() > LOSS_MAX:
            why.append(f"{p.loss() * 100:.1f} % of {p.sent} probes lost")
        m, mid = p.base_ms(), typical.get((p.src_leaf, p.dst_leaf))
        if m is not None and mid is not None and m > mid + max(SLACK_MS, (FACTOR - 1) * mid):
            why.insert(0, f"{m:.1f} ms one way (10th percentile), its pair's paths "
                          f"{mid:.1f} ms")
        if why:
            out[p.index] = ", ".join(why)
    return out


def explain(spec: FabricSpec, paths: Sequence[Path], failing: dict[int, str],
            light: Callable[[list[Link]], dict[str, dict]]) -> tuple[dict[str, str],
                                                                   dict[str, str], list[int]]:
    """Which links and switches the failing paths point at.

    ``light`` measures links alone with light frames and returns, per link name, its
    ``latency_ms`` (the slower direction) and ``loss``. A link of a failing path is
    named when its one-way time exceeds the spec's delay by :data:`SLACK_MS` or it
    loses more than :data:`LOSS_MAX`; a failing path no named link explains names each
    switch between its end leaves all of whose paths failed. Returns (link -> reason,
    switch -> reason, the paths left unexplained)."""
    by_name = {link_name(spec, lk): lk for lk in spec.links}
    suspects = sorted({name for i in failing for name in paths[i].links})
    measured = light([by_name[n] for n in suspects]) if suspects else {}
    links: dict[str, str] = {}
    for name, m in measured.items():
        why = []
        if m["latency_ms"] is None or m["loss"] > LOSS_MAX:
            why.append(f"{m['loss'] * 100:.1f} % of light frames lost")
        if m["latency_ms"] is not None and m["latency_ms"] > spec.delay_ms + SLACK_MS:
            why.append(f"{m['latency_ms']:.1f} ms one way alone "
                       f"(configured {spec.delay_ms:g} ms)")
        if why:
            n_fail = sum(1 for i in failing if name in paths[i].links)
            links[name] = ", ".join(why) + f"; {n_fail} slow or lossy paths cross it"
    left = [i for i in failing if not set(paths[i].links) & set(links)]
    switches: dict[str, str] = {}
    for i in left:
        for sw, _ in paths[i].hops[1:]:  # between the end leaves
            through = [q for q in paths if sw in (s for s, _ in q.hops)]
            if all(q.index in failing for q in through):
                switches[short(spec, sw)] = (f"all {len(through)} paths through it fail "
                                             f"and none of their links does alone")
    left = [i for i in left
            if not {short(spec, s) for s, _ in paths[i].hops[1:]} & set(switches)]
    return links, switches, left
