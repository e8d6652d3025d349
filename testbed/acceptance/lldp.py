"""LLDP (IEEE 802.1AB) on the lab's wires: every link end says who it is, every end
records whom it heard.

A frame carries the node's name as its chassis ID (subtype 7, locally assigned), the
interface's name as its port ID (subtype 5, interface name), a TTL and the lab's name as
system name, to the nearest-bridge group address 01:80:c2:00:00:0e, which no bridge
forwards (Open vSwitch drops the reserved 01:80:c2:00:00:0X group unless
``other_config:forward-bpdu`` is set), so what an end hears came over its own cable.
Frames are built and read with Scapy; each end's frame is sent three times within half
a second from a raw packet socket bound to the interface, in the namespace that holds it
(a host's NIC in the host's, a switch port in the root namespace).
"""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from scapy.contrib.lldp import (
    LLDPDU,
    LLDPDUChassisID,
    LLDPDUEndOfLLDPDU,
    LLDPDUPortID,
    LLDPDUSystemName,
    LLDPDUTimeToLive,
)
from scapy.layers.l2 import Ether

from testbed.host import netns

ETH_P_LLDP = 0x88CC
NEAREST_BRIDGE = "01:80:c2:00:00:0e"
PACKET_OUTGOING = 4
TTL_S = 120


@dataclass(frozen=True)
class End:
    """One end of a cable: its node, interface, MAC and the namespace that holds it
    (a path such as ``/proc/PID/ns/net``; None: the root namespace)."""

    node: str
    ifname: str
    mac: str
    netns: str | None = None


@dataclass(frozen=True)
class Heard:
    """What one LLDP frame said: the sender's node (chassis ID) and interface (port ID)."""

    node: str
    port: str
    system: str = ""


def frame(end: End, system: str) -> bytes:
    """The LLDP frame ``end`` sends.

    >>> f = frame(End("n0", "n0p0r0", "02:00:00:00:00:01"), "lab")
    >>> f[:6].hex(), f[12:14].hex(), parse(f)
    ('0180c200000e', '88cc', Heard(node='n0', port='n0p0r0', system='lab'))
    """
    return bytes(Ether(dst=NEAREST_BRIDGE, src=end.mac, type=ETH_P_LLDP)
                 / LLDPDUChassisID(subtype=7, id=end.node.encode())
                 / LLDPDUPortID(subtype=5, id=end.ifname.encode())
                 / LLDPDUTimeToLive(ttl=TTL_S)
                 / LLDPDUSystemName(system_name=system.encode())
                 / LLDPDUEndOfLLDPDU())


def parse(data: bytes) -> Heard | None:
    """The sender of an LLDP frame; None for anything else (or a frame missing its IDs)."""
    try:
        pkt = Ether(data)
    except Exception:  # noqa: BLE001 -- Scapy raises many kinds on garbage
        return None
    if not pkt.haslayer(LLDPDU) or not pkt.haslayer(LLDPDUChassisID) \
            or not pkt.haslayer(LLDPDUPortID):
        return None
    system = pkt[LLDPDUSystemName].system_name if pkt.haslayer(LLDPDUSystemName) else b""
    return Heard(_text(pkt[LLDPDUChassisID].id), _text(pkt[LLDPDUPortID].id), _text(system))


def _text(value) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _socket(end: End) -> socket.socket:
    return netns.packet_socket(end.netns, end.ifname, ETH_P_LLDP)


def exchange(ends: Sequence[End], system: str, listen_s: float = 1.0,
             repeats: int = 3) -> dict[End, list[Heard]]:
    """Every end sends its frame ``repeats`` times, spread over the first half of
    ``listen_s`` (a lossy cable must not pass for a missing one); what each end heard
    within ``listen_s`` (frames it sent itself not counted). An interface that is down
    hears nothing and sends nothing, which is what a missing cable looks like too."""
    socks: dict[End, socket.socket] = {}
    heard: dict[End, list[Heard]] = {e: [] for e in ends}
    frames = {e: frame(e, system) for e in ends}
    try:
        for end in ends:
            try:
                socks[end] = _socket(end)
            except OSError:  # the interface is gone: hears nothing
                continue
        start = time.monotonic()
        sends = [start + k * listen_s / 2 / max(1, repeats - 1) for k in range(repeats)]
        deadline = start + listen_s
        while (left := deadline - time.monotonic()) > 0 and socks:
            if sends and time.monotonic() >= sends[0]:
                sends.pop(0)
                for end, sock in socks.items():
                    try:
                        sock.send(frames[end])
                    except OSError:  # down: sends nothing
                        continue
            wait = min(left, max(0.0, sends[0] - time.monotonic())) if sends else left
            by_fd = {s.fileno(): e for e, s in socks.items()}
            ready, _, _ = select.select(list(socks.values()), [], [], wait)
            for sock in ready:
                end = by_fd[sock.fileno()]
                while True:
                    try:
                        data, addr = sock.recvfrom(65535)
                    except BlockingIOError:
                        break
                    except OSError:  # the interface went down (ENETDOWN): hears no more
                        socks.pop(end).close()
                        break
                    if addr[2] == PACKET_OUTGOING:
                        continue
                    what = parse(data)
                    if what is not None:
                        heard[end].append(what)
    finally:
        for sock in socks.values():
            sock.close()
    return heard
