"""Fabric calculator: how far a non-blocking fabric reaches, single- vs multi-plane, two
or three tiers.

A switch of capacity T can be cut into ports of any speed. If each GPU's bandwidth G is
split evenly over P planes, every plane needs ports of only G/P, so the same switch has
P times the radix k. A non-blocking two-tier leaf-spine (leaves with k/2 ports down and
k/2 up, spines with k ports) reaches k^2/2 hosts, so splitting into planes multiplies
the reach by P^2.

>>> r = calculate(switch_tbps=102.4, gpu_gbps=1600, planes=8)
>>> r["single_plane"]["radix"], r["single_plane_max_gpus"]
(64, 2048)
>>> r["multi_plane"]["radix"], r["max_gpus"], r["reach_ratio"]
(512, 131072, 64.0)
>>> r["single_plane_tiers_for_same_gpus"], r["single_plane_switch_hops_for_same_gpus"]
(4, 7)

The other way to grow a single plane is a third tier: a k-ary three-tier fat-tree
(edge, aggregation, core; Al-Fares et al.) reaches k^3/4 hosts, but every path between
pods crosses 5 switches instead of 3, each with its queue and its share of jitter. With
the same switch, 8 planes of two tiers reach twice as many GPUs as one three-tier plane,
in 3 switch hops:

>>> t = r["single_plane_three_tier"]
>>> t["radix"], t["max_gpus"], t["switches"], t["switch_hops"], r["multi_plane"]["switch_hops"]
(64, 65536, 5120, 5, 3)
>>> r["multi_plane_vs_three_tier"]
2.0
"""

from __future__ import annotations

import math

from topologies.spec import TopologyError


def allreduce_ms(nbytes: float, ranks: int, nic_mbps: float) -> float:
    """What a fabric's capacity allows a ring all-reduce of ``nbytes`` over ``ranks``
    nodes, each with ``nic_mbps`` of NIC bandwidth (all planes): every rank sends
    2 (N-1)/N of the bytes (reduce-scatter, then all-gather), at best at its NIC's rate.

    >>> allreduce_ms(1_000_000, 8, 40)
    350.0
    """
    return 2 * (ranks - 1) / ranks * nbytes * 8 / (nic_mbps * 1e6) * 1000


def _plane_design(switch_gbps: float, gpu_gbps: float, planes: int) -> dict:
    port_gbps = gpu_gbps / planes
    radix = int(switch_gbps // port_gbps)
    if radix < 2:
        raise TopologyError(
            "switch_tbps", f"a {switch_gbps / 1000:g} Tb/s switch has fewer than 2 ports "
            f"of {port_gbps:g} Gb/s"
        )
    radix -= radix % 2  # half the ports face down, half up
    hosts = radix * radix // 2
    leaves = radix  # per plane: k leaves with k/2 hosts each
    spines = radix // 2
    return {
        "planes": planes,
        "port_gbps": port_gbps,
        "radix": radix,
        "max_gpus": hosts,
        "leaves_per_plane": leaves,
        "spines_per_plane": spines,
        "switches": planes * (leaves + spines),
        "tiers": 2,
        "switch_hops": 3,  # leaf, spine, leaf
        "link_hops": 4,
        "bisection_tbps": hosts * gpu_gbps / 2 / 1000,
    }


def three_tier_design(radix: int) -> dict:
    """A single plane of radix-``radix`` switches grown to three tiers: a k-ary fat-tree.

    >>> d = three_tier_design(4)  # the Hedera testbed: 16 hosts, 20 switches
    >>> d["max_gpus"], d["switches"], d["switch_hops"], d["pods"]
    (16, 20, 5, 4)
    """
    k = radix - radix % 2
    return {
        "radix": k,
        "tiers": 3,
        "pods": k,
        "max_gpus": k ** 3 // 4,
        "switches": 5 * k * k // 4,  # k pods of k/2 edge + k/2 aggregation, (k/2)^2 cores
        "switch_hops": 5,  # edge, aggregation, core, aggregation, edge
        "link_hops": 6,
    }


def tiers_needed(radix: int, gpus: int) -> int:
    """Tiers of a fat-tree of radix-``radix`` switches to reach ``gpus`` (2*(k/2)^t hosts).

    >>> tiers_needed(64, 2048), tiers_needed(64, 2049), tiers_needed(64, 131072)
    (2, 3, 4)
    """
    tiers = 1
    while 2 * (radix // 2) ** tiers < gpus:
        tiers += 1
    return tiers


def calculate(*, switch_tbps: float, gpu_gbps: float, planes: int,
              lane_gbps: float = 200.0) -> dict:
    """Compare single-plane and ``planes``-plane two-tier fabrics for one switch and GPU.

    A port is at least one SerDes lane (``lane_gbps``, 200 Gb/s in today's 102.4 Tb/s
    switches), so the radix is at most capacity / lane speed.
    """
    for name, value in (("switch_tbps", switch_tbps), ("gpu_gbps", gpu_gbps),
                        ("lane_gbps", lane_gbps)):
        if not isinstance(value, int | float) or isinstance(value, bool) or not value > 0 \
                or not math.isfinite(value):
            raise TopologyError(name, f"must be a positive finite number, got {value!r}")
    if isinstance(planes, bool) or not isinstance(planes, int) or planes < 1:
        raise TopologyError("planes", f"must be a positive integer, got {planes!r}")
    switch_gbps = switch_tbps * 1000
    if gpu_gbps / planes > switch_gbps / 2:
        raise TopologyError("planes", "each plane's port is faster than half the switch")
    if gpu_gbps / planes < lane_gbps:
        raise TopologyError(
            "planes", f"{planes} planes give {gpu_gbps / planes:g} Gb/s ports, slower than one "
            f"{lane_gbps:g} Gb/s SerDes lane (at most {int(switch_gbps // lane_gbps)} ports)")
    single = _plane_design(switch_gbps, gpu_gbps, 1)
    multi = _plane_design(switch_gbps, gpu_gbps, planes)
    tiers = tiers_needed(single["radix"], multi["max_gpus"])
    three = three_tier_design(single["radix"])
    return {
        "switch_tbps": switch_tbps,
        "gpu_gbps": gpu_gbps,
        "planes": planes,
        "max_gpus": multi["max_gpus"],
        "single_plane_max_gpus": single["max_gpus"],
        "reach_ratio": multi["max_gpus"] / single["max_gpus"],
        "single_plane": single,
        "multi_plane": multi,
        "single_plane_tiers_for_same_gpus": tiers,
        "single_plane_switch_hops_for_same_gpus": 2 * tiers - 1,
        "single_plane_three_tier": three,
        "multi_plane_vs_three_tier": multi["max_gpus"] / three["max_gpus"],
    }


def format_table(result: dict) -> str:
    """A human-readable side-by-side table of :func:`calculate`'s result."""
    single, multi = result["single_plane"], result["multi_plane"]
    rows = [
        ("planes", single["planes"], multi["planes"]),
        ("port speed (Gb/s)", f"{single['port_gbps']:g}", f"{multi['port_gbps']:g}"),
        ("switch radix", single["radix"], multi["radix"]),
        ("max GPUs, two tiers", f"{single['max_gpus']:,}", f"{multi['max_gpus']:,}"),
        ("switches (all planes)", f"{single['switches']:,}", f"{multi['switches']:,}"),
        ("switch hops", single["switch_hops"], multi["switch_hops"]),
        ("bisection (Tb/s)", f"{single['bisection_tbps']:,.1f}", f"{multi['bisection_tbps']:,.1f}"),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [
        f"{result['switch_tbps']:g} Tb/s switch, {result['gpu_gbps']:g} Gb/s per GPU",
        f"{'':{width}}  {'single-plane':>14}  {str(result['planes']) + '-plane':>14}",
    ]
    lines += [f"{name:{width}}  {a!s:>14}  {b!s:>14}" for name, a, b in rows]
    tiers = result["single_plane_tiers_for_same_gpus"]
    lines.append(
        f"multi-plane reach: {result['reach_ratio']:g}x single-plane; a single plane needs "
        f"{tiers} tiers ({2 * tiers - 1} switch hops) for {result['max_gpus']:,} GPUs"
    )
    three = result["single_plane_three_tier"]
    lines.append(
        f"a third tier instead (single plane, k={three['radix']} fat-tree): "
        f"{three['max_gpus']:,} GPUs, {three['switches']:,} switches, "
        f"{three['switch_hops']} switch hops; {result['planes']} planes of two tiers reach "
        f"{result['multi_plane_vs_three_tier']:g}x that in {multi['switch_hops']} hops "
        f"({three['switch_hops'] - multi['switch_hops']} queues, and their jitter, fewer "
        "on every path)")
    return "\n".join(lines)
