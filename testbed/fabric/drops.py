"""Drops that no switch queue counts: the other places a frame of a fabric can vanish.

A frame dropped by a switch port's egress queue is counted by its qdisc
(:meth:`testbed.fabric.net.Fabric.queue_stats`). The kernel counts the others where they
happen, in places a run has to look at:

- ``switch_sockets``: the switch processes' packet sockets on the lab's ports whose
  receive buffer overflowed (``sk_drops``, the ``d`` of ``ss -0 -m``): ovs-vswitchd did
  not read a port fast enough;
- ``interfaces``: the lab's interfaces' own rx/tx drops (``/proc/PID/net/dev``; a veth
  counts a frame its peer could not take);
- ``host_udp``: the hosts' UDP receive buffer overflows and receive errors
  (``RcvbufErrors``, ``InErrors`` of ``/proc/PID/net/snmp`` in each host's namespace):
  a receiving process that did not read in time;
- ``host_ip``: the hosts' IP input discards (``InDiscards``);
- ``backlog``: the kernel's per-CPU input backlog overflows (``/proc/net/softnet_stat``):
  host-wide, so another program's frames count too;
- ``switch_unsent`` (userspace datapath): frames the switch processes read from the
  lab's ports (``packets received`` of ``dpif-netdev/pmd-stats-show``) that reached no switch port's
  queue (each root qdisc's packets sent, dropped and held, less the PFC agent's kick
  frames, which the agent puts into a port's queue itself). The larger part, when there
  is one, is sends ovs-vswitchd abandoned: when a port's queue refuses a frame (a tail
  drop, ENOBUFS), ovs-vswitchd 3.1 discards the rest of the frames it was sending out of
  that port in the same batch, frames the queue would have taken, and no queue counts
  them (``python -m bench.batch_drop`` shows it). Also in it: frames a rule dropped or
  sent to the controller. An estimate that errs low: floods count against it, and so
  does the refused frame itself, which ovs-vswitchd sends once more (``sendmmsg``
  reports the frames sent before the refusal, and the next call starts at the refused
  one), so that the queue counts it twice, dropped and then sent or dropped again.
  ``switch_unsent_max`` adds one frame per drop at the switch ports, a bound the
  abandoned frames stay under; on the host's ovs-vswitchd every bridge it has counts.

:func:`read` takes one reading, :func:`delta` the difference of two; a run records the
difference over its measured window.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

from testbed.fabric.qos import KICK_MINOR
from testbed.host import packet_sockets
from testbed.host.packet_sockets import PacketSocket


def socket_drops(sockets: Iterable[tuple[PacketSocket, int, int]], ifnames: Iterable[str],
                 pids: Iterable[int] | None = None, name=None) -> int:
    """Receive-buffer drops of the packet sockets ``(socket, pid, fd)`` bound to
    ``ifnames`` (held by ``pids``; None: any); ``name`` gives an interface's name by
    its index (default: this namespace's).

    >>> s = PacketSocket(inode=1, protocol=3, ifindex=9, rcvbuf=8, sndbuf=8, drops=3)
    >>> names = {9: "tb1p0l0e1"}.get
    >>> (socket_drops([(s, 7, 40)], ["tb1p0l0e1"], name=names),
    ...  socket_drops([(s, 7, 40)], ["other"], name=names),
    ...  socket_drops([(s, 7, 40)], ["tb1p0l0e1"], [8], name=names))
    (3, 0, 0)
    """
    names, wanted = set(ifnames), None if pids is None else set(pids)
    name = name or packet_sockets.ifname
    return sum(s.drops for s, pid, _ in sockets
               if s.ifindex and (wanted is None or pid in wanted) and name(s.ifindex) in names)


def parse_dev(text: str, prefix: str) -> dict[str, int]:
    """rx + tx drops of every interface named ``prefix...`` in ``/proc/net/dev`` text.

    >>> parse_dev("Inter-|   Receive\\n face |bytes\\n"
    ...           "tb1p0l0e1: 10 1 0 2 0 0 0 0 20 2 0 5 0 0 0 0\\n"
    ...           "    lo: 1 1 0 9 0 0 0 0 1 1 0 9 0 0 0 0\\n", "tb1")
    {'tb1p0l0e1': 7}
    """
    out = {}
    for line in text.splitlines()[2:]:
        name, _, fields = line.partition(":")
        name, values = name.strip(), fields.split()
        if name.startswith(prefix) and len(values) >= 12:
            out[name] = int(values[3]) + int(values[11])
    return out


def parse_snmp(text: str) -> dict[str, dict[str, int]]:
    """``/proc/net/snmp`` as ``{"Udp": {"RcvbufErrors": n, ...}, "Ip": {...}}``.

    >>> parse_snmp("Udp: InDatagrams RcvbufErrors\\nUdp: 5 2\\n")["Udp"]["RcvbufErrors"]
    2
    """
    out: dict[str, dict[str, int]] = {}
    lines = text.splitlines()
    for head, values in zip(lines[::2], lines[1::2], strict=False):
        proto, _, names = head.partition(":")
        _, _, numbers = values.partition(":")
        out[proto] = {k: int(v) for k, v in zip(names.split(), numbers.split(), strict=False)}
    return out


def parse_softnet(text: str) -> int:
    """Backlog overflows summed over the CPUs (the second column, hexadecimal).

    >>> parse_softnet("0000a000 00000002 00000000\\n0000b000 00000001 00000000\\n")
    3
    """
    return sum(int(line.split()[1], 16) for line in text.splitlines() if len(line.split()) > 1)


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:  # a host that is gone: nothing to read, nothing counted
        return ""


def _switch_sockets() -> list[tuple[PacketSocket, int, int]]:
    return packet_sockets.held_by("ovs-vswitchd")


def read(prefix: str, switch_ports: Iterable[str], hosts: Mapping[str, int],
         switch_pids: Iterable[int] | None = None, proc: Path = Path("/proc")) -> dict:
    """One reading of every counter above for the fabric whose names start ``prefix``:
    ``switch_ports`` (root namespace), ``hosts`` (name -> a pid in its namespace)."""
    ports = list(switch_ports)
    interfaces = parse_dev(_read(proc / "net" / "dev"), prefix)
    udp = ip = 0
    for pid in hosts.values():
        interfaces.update(parse_dev(_read(proc / str(pid) / "net" / "dev"), prefix))
        snmp = parse_snmp(_read(proc / str(pid) / "net" / "snmp"))
        udp += snmp.get("Udp", {}).get("RcvbufErrors", 0) + snmp.get("Udp", {}).get("InErrors", 0)
        ip += snmp.get("Ip", {}).get("InDiscards", 0)
    return {"switch_sockets": socket_drops(_switch_sockets(), ports, switch_pids),
            "interfaces": interfaces, "host_udp": udp, "host_ip": ip,
            "backlog": parse_softnet(_read(proc / "net" / "softnet_stat"))}


def switch_intake(queues: Mapping[str, object],
                  leaves: Mapping[tuple[str, int], object] | None = None) -> tuple[int, int]:
    """Frames the switch ports' root qdiscs took in so far (sent, dropped, held), and
    how many of those they dropped; both less the PFC agent's kick frames (``leaves``:
    the ports' leaf qdiscs by name and handle major): the agent sends a kick frame into
    a port's own queue when it resumes it, the queue drops it, and the switch never
    read it.

    >>> from types import SimpleNamespace as Q
    >>> roots = {"p1": Q(sent_packets=90, drops=7, backlog_packets=3)}
    >>> switch_intake(roots), switch_intake(roots, {("p1", 0xFF): Q(sent_packets=0, drops=5,
    ...                                             backlog_packets=0)})
    ((100, 7), (95, 2))
    """
    taken = sum(q.sent_packets + q.drops + q.backlog_packets for q in queues.values())
    dropped = sum(q.drops for q in queues.values())
    for (name, major), q in (leaves or {}).items():
        if major == KICK_MINOR and name in queues:
            taken -= q.sent_packets + q.drops + q.backlog_packets
            dropped -= q.drops
    return taken, dropped


def received(ctls: Iterable[str | None]) -> int | None:
    """Frames the switch processes (their unixctl sockets; None: the host's) read from
    their ports so far, or None if one cannot be asked."""
    total = 0
    for ctl in ctls:
        argv = ["ovs-appctl"] + (["-t", ctl] if ctl else []) + ["dpif-netdev/pmd-stats-show"]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if done.returncode:
            return None
        total += packets_received(done.stdout)
    return total


def packets_received(text: str) -> int:
    """Frames every thread of ``dpif-netdev/pmd-stats-show`` received (the coverage
    counter ``netdev_received`` counts receive calls, not frames).

    >>> packets_received("main thread:\\n  packets received: 6012\\n"
    ...                  "pmd thread numa_id 0 core_id 1:\\n  packets received: 8\\n")
    6020
    """
    return sum(int(m.group(1)) for m in re.finditer(r"^\s*packets received: (\d+)", text, re.M))


def delta(before: dict, after: dict) -> dict:
    """What each counter gained between two readings, with ``total`` (of the lab's own
    counters; the host-wide backlog apart); interfaces only where they dropped.

    >>> a = {"switch_sockets": 1, "interfaces": {"x": 2}, "host_udp": 0, "host_ip": 0,
    ...      "backlog": 5}
    >>> delta(a, {**a, "interfaces": {"x": 4, "y": 0}, "backlog": 6})["total"]
    2
    """
    ifs = {k: v - before["interfaces"].get(k, 0) for k, v in after["interfaces"].items()}
    out = {key: after[key] - before[key]
           for key in ("switch_sockets", "host_udp", "host_ip", "backlog")}
    out["interfaces"] = {k: v for k, v in sorted(ifs.items()) if v > 0}
    out["total"] = (out["switch_sockets"] + out["host_udp"] + out["host_ip"]
                    + sum(out["interfaces"].values()))
    if before.get("switch_received") is not None and after.get("switch_received") is not None:
        got = after["switch_received"] - before["switch_received"]
        taken = after["switch_intake"] - before["switch_intake"]
        out["switch_unsent"] = max(0, got - taken)
        out["total"] += out["switch_unsent"]
        # a send that a queue refused is tried once more (sendmmsg reports the frames
        # before the refused one; the switch starts its next call at that frame), so a
        # queue can count one read frame twice: at most one extra per drop
        dropped = after["switch_queue_drops"] - before["switch_queue_drops"]
        out["switch_unsent_max"] = max(0, got - taken + dropped)
    return out
