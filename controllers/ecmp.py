"""Static-hash ECMP as the switches run it: a 5-tuple hash over the live uplinks.

Plans (:mod:`controllers.paths`, :mod:`controllers.failover`) name *ECMP sets*: an id
and its member ports. A flow rule spreads over a set with Open vSwitch's ``bundle``
action (a Nicira extension, usable over OpenFlow 1.3): highest-random-weight over a
hash of the IPv4 addresses, the IP protocol and the TCP *or UDP* ports, restricted to
members that are up (carrier and admin state), so a dead uplink drops out in the
datapath without the controller, as a select group's ``watch_port`` did.

Why not an OpenFlow select group: OVS 3.1's default selection method for select groups
is ``dp_hash`` with the symmetric L3/L4 hash, which leaves UDP ports out. Measured on
this userspace datapath: 32 UDP flows of one host pair to port 4791, 160 packets, all in
bucket 0 (the datapath flow matched no port at all). RoCEv2 puts its entropy in the UDP
source port, so every queue pair between two hosts took the same uplink, and a fixed
pattern of host pairs took the same uplinks whatever the seed: a baseline weaker than
any real switch's. The property that selects a hash over chosen fields
(``selection_method=hash``) is an OpenFlow 1.5 group property; OpenFlow 1.3 group mods
cannot carry it. The same 32 flows through ``bundle`` split 80/80 packets.

``bundle_load`` is the same choice written to a register instead of output, for rules
that must act on the chosen port first (ECN marking of ECN-capable traffic, in
:mod:`controllers.congestion_app`): same fields, basis and members, so the same member.

Rules that pin traffic to one uplink (adaptive per-flow rules, spray buckets) use
:func:`prefer`: ``bundle`` with the active-backup algorithm, the chosen uplink first and
the others after it, so a pinned flow whose uplink dies moves on in the datapath instead
of being dropped until the controller notices (its rule would never idle out).
"""

from __future__ import annotations

from os_ken.ofproto import nicira_ext

#: NX_HASH_FIELDS_SYMMETRIC_L3L4_UDP: IPv4/IPv6 addresses, protocol, TCP/SCTP/UDP ports
HASH_FIELDS = 3
HASH_BASIS = 0
#: the register ``bundle_load`` writes the chosen port to (table :data:`PORT_TABLE` reads it)
PORT_REG = "reg0"
#: table of the rules that act on a ``bundle_load`` choice
PORT_TABLE = 1


def spread(parser, ports: list[int]):
    """The action that sends a packet out of one live member of ``ports`` by its hash."""
    return parser.NXActionBundle(
        algorithm=nicira_ext.NX_BD_ALG_HRW, fields=HASH_FIELDS, basis=HASH_BASIS,
        slave_type=nicira_ext.NXM_OF_IN_PORT, n_slaves=len(ports), ofs_nbits=0, dst=0,
        slaves=list(ports))


def backup_order(port: int, ports: list[int]) -> list[int]:
    """``port`` first, then the other members from the one after it, round the list, so
    flows pinned to different uplinks fall back to different ones.

    >>> backup_order(4, [3, 4, 5, 6])
    [4, 5, 6, 3]
    >>> backup_order(7, [3, 4])  # not a member: it alone, then the members
    [7, 3, 4]
    """
    if port not in ports:
        return [port, *ports]
    i = ports.index(port)
    return ports[i:] + ports[:i]


def prefer(parser, port: int, ports: list[int]):
    """The action that sends a packet out of ``port`` while it is up, else out of the
    next live member of ``ports`` in :func:`backup_order`."""
    order = backup_order(port, ports)
    return parser.NXActionBundle(
        algorithm=nicira_ext.NX_BD_ALG_ACTIVE_BACKUP, fields=HASH_FIELDS, basis=HASH_BASIS,
        slave_type=nicira_ext.NXM_OF_IN_PORT, n_slaves=len(order), ofs_nbits=0, dst=0,
        slaves=order)


def choose(parser, ports: list[int]):
    """The action that writes the port :func:`spread` would pick into :data:`PORT_REG`."""
    return parser.NXActionBundleLoad(
        algorithm=nicira_ext.NX_BD_ALG_HRW, fields=HASH_FIELDS, basis=HASH_BASIS,
        slave_type=nicira_ext.NXM_OF_IN_PORT, n_slaves=len(ports),
        ofs_nbits=nicira_ext.ofs_nbits(0, 31), dst=PORT_REG, slaves=list(ports))
