"""nftables loss: drop a random fraction of packets where netem is missing.

Shared by the backbone (routed namespaces: an ``inet`` postrouting hook) and the
fabric (switch ports in the root namespace, which Open vSwitch reads and writes
through packet sockets, not the IP stack: a ``netdev`` egress hook on the port).
Both draw ``numgen random mod LOSS_SCALE`` per packet, so the loss is independent
per packet, as netem's ``loss`` is.
"""

from __future__ import annotations

LOSS_SCALE = 1000  # drop when numgen random mod LOSS_SCALE < loss * LOSS_SCALE


def loss_threshold(loss: float) -> int:
    """``loss`` in steps of 1/LOSS_SCALE, never rounded to "drop nothing".

    >>> loss_threshold(0.05), loss_threshold(0.0001), loss_threshold(2)
    (50, 1, 1000)
    """
    return max(1, min(LOSS_SCALE, round(loss * LOSS_SCALE)))


def loss_rules(table: str, ifname: str, loss: float) -> str:
    """nftables ruleset dropping ``loss`` (a fraction) of what leaves ``ifname``.

    Hooked at postrouting, so routed and locally sent packets (OSPF, BFD) both count.

    >>> print(loss_rules("tb1a2bloss3", "tb1a2bl3a", 0.05), end="")
    table inet tb1a2bloss3 {
     chain postrouting { type filter hook postrouting priority -300; policy accept;
      oifname "tb1a2bl3a" numgen random mod 1000 < 50 drop
     }
    }
    """
    return (f"table inet {table} {{\n"
            " chain postrouting { type filter hook postrouting priority -300; policy accept;\n"
            f"  oifname \"{ifname}\" numgen random mod {LOSS_SCALE} < {loss_threshold(loss)} drop\n"
            " }\n}\n")


def port_loss_rules(table: str, ifname: str, loss: float) -> str:
    """nftables ruleset dropping ``loss`` of the frames sent out of device ``ifname``.

    A ``netdev`` table with an egress hook bound to the device: it sees every frame
    handed to the device (a packet socket's too), before the device's qdisc.

    >>> print(port_loss_rules("tb1a2bdeg0", "tb1a2bp0l0e3", 0.2), end="")
    table netdev tb1a2bdeg0 {
     chain egress { type filter hook egress device "tb1a2bp0l0e3" priority 0; policy accept;
      numgen random mod 1000 < 200 drop
     }
    }
    """
    return (f"table netdev {table} {{\n"
            f" chain egress {{ type filter hook egress device \"{ifname}\" priority 0; "
            "policy accept;\n"
            f"  numgen random mod {LOSS_SCALE} < {loss_threshold(loss)} drop\n"
            " }\n}\n")
