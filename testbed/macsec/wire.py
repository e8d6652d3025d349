"""The wire of an experiment: a hub that an attacker can tap, and link shaping.

Layout of a tapped wire (``P`` = ``tb`` + run id)::

    netns Pa: veth Pva ---- Pwa \\
    netns Pb: veth Pvb ---- Pwb --- bridge Pw (hub) in netns Pw
    netns Px: veth Pxv ---- Pwx /

The bridge ages its MAC table at once (``ageing_time 0``), so it floods every
frame to every port like a hub: the attacker sees the traffic between a and b,
and a capture on ``Pwb`` sees everything that reaches b, attacks included.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import OVERHEAD, LinkConfig
from .netns import add_netns, del_netns, no_ipv6, run

#: Packets the shaped link may queue (at 20 Mb/s and 1500 B, 60 ms).
QUEUE_PACKETS = 100


@dataclass(frozen=True)
class TappedWire:
    """Names of the hub, its namespace and the attacker's end."""

    prefix: str

    @property
    def netns(self) -> str:
        return self.prefix + "w"

    @property
    def bridge(self) -> str:
        return self.prefix + "w"

    @property
    def attacker_netns(self) -> str:
        return self.prefix + "x"

    @property
    def attacker_veth(self) -> str:
        return self.prefix + "xv"

    def port(self, side: str) -> str:
        """The hub's port toward side ``a``, ``b`` or ``x`` (the attacker)."""
        return f"{self.prefix}w{side}"

    def create(self, mtu: int) -> None:
        """The hub namespace and bridge, and the attacker namespace with its veth.

        The caller registers :meth:`remove` before calling this.
        """
        for ns in (self.netns, self.attacker_netns):
            add_netns(ns)
            no_ipv6(ns)
        run(["ip", "link", "add", self.bridge, "type", "bridge", "ageing_time", "0",
             "stp_state", "0", "mcast_snooping", "0"], netns=self.netns)
        run(["ip", "link", "add", self.attacker_veth, "netns", self.attacker_netns, "mtu",
             str(mtu), "type", "veth", "peer", "name", self.port("x"), "netns", self.netns,
             "mtu", str(mtu)])
        run(["ip", "link", "set", self.attacker_veth, "up"], netns=self.attacker_netns)
        self._attach(self.port("x"), mtu)

    def _attach(self, port: str, mtu: int) -> None:
        run(["ip", "link", "set", port, "mtu", str(mtu), "master", self.bridge, "up"],
            netns=self.netns)
        run(["ip", "link", "set", self.bridge, "up"], netns=self.netns)

    def build(self, cfg: LinkConfig) -> None:
        """The link's wire (a :data:`~testbed.macsec.link.Wire`): a and b onto the hub."""
        mtu = cfg.mtu + OVERHEAD
        for side in (cfg.a, cfg.b):
            run(["ip", "link", "add", side.veth, "netns", side.netns, "mtu", str(mtu), "type",
                 "veth", "peer", "name", self.port(side.name), "netns", self.netns, "mtu",
                 str(mtu)])
            self._attach(self.port(side.name), mtu)

    def remove(self) -> None:
        """Delete both namespaces (the bridge and veth ends go with them)."""
        for ns in (self.attacker_netns, self.netns):
            del_netns(ns)


def shape(ifname: str, netns: str, mbps: float, mtu: int) -> None:
    """Limit egress of ``ifname`` to ``mbps`` with HTB and a short FIFO."""
    burst = max(15000, 4 * (mtu + 64))
    dev = ["dev", ifname]
    run(["tc", "qdisc", "replace", *dev, "root", "handle", "1:", "htb", "default", "10"],
        netns=netns)
    run(["tc", "class", "add", *dev, "parent", "1:", "classid", "1:10", "htb", "rate",
         f"{mbps * 1000:.0f}kbit", "ceil", f"{mbps * 1000:.0f}kbit", "burst", str(burst),
         "cburst", str(burst)], netns=netns)
    run(["tc", "qdisc", "add", *dev, "parent", "1:10", "handle", "10:", "pfifo", "limit",
         str(QUEUE_PACKETS)], netns=netns)


def plain_pair(cfg: LinkConfig) -> None:
    """The unprotected twin of a link: the same namespaces and addresses on a plain veth."""
    for side in (cfg.a, cfg.b):
        add_netns(side.netns)
        no_ipv6(side.netns)
    run(["ip", "link", "add", cfg.a.veth, "netns", cfg.a.netns, "type", "veth",
         "peer", "name", cfg.b.veth, "netns", cfg.b.netns])
    for side in (cfg.a, cfg.b):
        run(["ip", "link", "set", side.veth, "address", side.mac, "mtu", str(cfg.mtu), "up"],
            netns=side.netns)
        run(["ip", "addr", "add", side.ip, "dev", side.veth], netns=side.netns)


def remove_pair(cfg: LinkConfig) -> None:
    """Undo :func:`plain_pair`."""
    for side in (cfg.a, cfg.b):
        del_netns(side.netns)
