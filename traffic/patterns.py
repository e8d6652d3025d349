"""Who sends to whom: the destination of every rank under a traffic pattern.

- ``ring``: rank i sends to i+1 (the ring all-reduce);
- ``stride``: rank i sends to (i + stride) mod n, the Hedera fat-tree pattern that makes
  every flow cross the core when the stride is a multiple of the hosts per leaf;
- ``random``: a random permutation without fixed points (a derangement), drawn from the
  scenario's seed, so every seed gives a different but reproducible set of elephants.

Every pattern is a permutation, so each rank receives from exactly one other rank.

:func:`hedera` draws the elephant patterns of the Hedera benchmark suite (Al-Fares et
al., NSDI'10, section 6.1), where one host may receive several flows: stride,
staggered (same edge with ``edge_p``, same pod with ``pod_p``, elsewhere otherwise),
random (any other host), random bijection (a derangement) and hotspot.
"""

from __future__ import annotations

import random

PATTERNS = ("ring", "stride", "random")
HEDERA = ("stride", "staggered", "random", "bijection", "hotspot")


def destinations(pattern: str, n: int, *, stride: int | None = None, seed: int = 1) -> list[int]:
    """``out[i]`` is the rank that rank ``i`` sends to.

    >>> destinations("ring", 4)
    [1, 2, 3, 0]
    >>> destinations("stride", 8)
    [4, 5, 6, 7, 0, 1, 2, 3]
    >>> destinations("stride", 4, stride=1) == destinations("ring", 4)
    True
    """
    if n < 2:
        raise ValueError(f"a pattern needs at least 2 ranks, got {n}")
    if pattern == "ring":
        return [(i + 1) % n for i in range(n)]
    if pattern == "stride":
        s = n // 2 if stride is None else stride
        if s % n == 0:
            raise ValueError(f"stride {s} maps every rank to itself with {n} ranks")
        return [(i + s) % n for i in range(n)]
    if pattern == "random":
        return derangement(n, random.Random(seed))
    raise ValueError(f"unknown pattern {pattern!r} (known: {', '.join(PATTERNS)})")


def derangement(n: int, rng: random.Random) -> list[int]:
    """A uniformly random permutation of range(n) with no fixed point (rejection sampling).

    >>> p = derangement(6, random.Random(3)); sorted(p) == list(range(6))
    True
    """
    while True:
        perm = list(range(n))
        rng.shuffle(perm)
        if all(perm[i] != i for i in range(n)):
            return perm


def sources(dest: list[int]) -> list[int]:
    """The inverse permutation: ``out[j]`` is the rank that sends to rank ``j``.

    >>> sources([2, 0, 1])
    [1, 2, 0]
    """
    src = [-1] * len(dest)
    for i, j in enumerate(dest):
        if not 0 <= j < len(dest) or src[j] != -1:
            raise ValueError(f"not a permutation: {dest}")
        src[j] = i
    return src


def hedera(pattern: str, n: int, *, stride: int = 1, edge_hosts: int = 1, pod_hosts: int = 1,
           edge_p: float = 0.0, pod_p: float = 0.0, hotspots: int = 1, hot_flows: int = 1,
           seed: int = 1) -> list[int]:
    """``out[i]``: the host that host ``i`` sends its one elephant to, under a Hedera
    pattern. Hosts ``i`` and ``j`` share an edge switch when ``i // edge_hosts ==
    j // edge_hosts``, a pod when ``i // pod_hosts == j // pod_hosts``.

    - ``stride``: ``i + stride`` (mod n);
    - ``staggered``: a host of the same edge switch with probability ``edge_p``, of the
      same pod but another edge with ``pod_p``, of another pod otherwise (the nearest
      non-empty group when a group has no other host);
    - ``random``: any other host, uniformly (several may pick the same one);
    - ``bijection``: a random permutation without fixed points;
    - ``hotspot``: ``hotspots`` hosts drawn at random each receive ``hot_flows`` flows,
      every other host at most one (the Hedera authors' hotspot file: 2 hosts receive 3
      flows each, 10 one, 4 none). Every host sends one flow.

    >>> hedera("stride", 8, stride=2)
    [2, 3, 4, 5, 6, 7, 0, 1]
    >>> d = hedera("staggered", 16, edge_hosts=2, pod_hosts=4, edge_p=1.0)
    >>> all(d[i] // 2 == i // 2 and d[i] != i for i in range(16))
    True
    >>> d = hedera("staggered", 16, edge_hosts=2, pod_hosts=4, pod_p=1.0)
    >>> all(d[i] // 4 == i // 4 and d[i] // 2 != i // 2 for i in range(16))
    True
    >>> d = hedera("random", 16, seed=3); all(d[i] != i for i in range(16))
    True
    >>> sorted(hedera("bijection", 6, seed=2)) == list(range(6))
    True
    >>> d = hedera("hotspot", 16, hotspots=2, hot_flows=3, seed=5)
    >>> sorted(d.count(j) for j in set(d)), all(d[i] != i for i in range(16))
    ([1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 3, 3], True)
    """
    if n < 2:
        raise ValueError(f"a pattern needs at least 2 hosts, got {n}")
    rng = random.Random(seed)
    others = lambda i, same: [j for j in range(n) if j != i and same(i, j)]  # noqa: E731
    if pattern == "stride":
        if stride % n == 0:
            raise ValueError(f"stride {stride} maps every host to itself with {n} hosts")
        return [(i + stride) % n for i in range(n)]
    if pattern == "bijection":
        return derangement(n, rng)
    if pattern == "random":
        return [rng.choice(others(i, lambda a, b: True)) for i in range(n)]
    if pattern == "staggered":
        edge = lambda a, b: a // edge_hosts == b // edge_hosts  # noqa: E731
        pod = lambda a, b: a // pod_hosts == b // pod_hosts and not edge(a, b)  # noqa: E731
        far = lambda a, b: a // pod_hosts != b // pod_hosts  # noqa: E731
        out = []
        for i in range(n):
            r = rng.random()
            order = ([edge, pod, far] if r < edge_p else [pod, edge, far] if r < edge_p + pod_p
                     else [far, pod, edge])
            group = next(g for g in (others(i, same) for same in order) if g)
            out.append(rng.choice(group))
        return out
    if pattern == "hotspot":
        if hot_flows < 2:
            raise ValueError(f"a hotspot receives 2 flows or more, got {hot_flows}")
        if hotspots * hot_flows >= n:
            raise ValueError(f"{hotspots} hotspots x {hot_flows} flows need more than {n} hosts")
        hot = rng.sample(range(n), hotspots)
        out = [-1] * n
        senders = rng.sample(range(n), n)
        for h in [h for h in hot for _ in range(hot_flows)]:
            s = next(s for s in senders if s != h and out[s] < 0)
            out[s] = h
        rest = [s for s in senders if out[s] < 0]
        pool = [j for j in range(n) if j not in hot]
        while True:  # the others: distinct receivers, none itself (rejection sampling)
            rng.shuffle(pool)
            if all(s != r for s, r in zip(rest, pool, strict=False)):
                break
        for s, r in zip(rest, pool, strict=False):
            out[s] = r
        return out
    raise ValueError(f"unknown pattern {pattern!r} (known: {', '.join(HEDERA)})")
