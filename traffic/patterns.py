"""Who sends to whom: the destination of every rank under a traffic pattern.

- ``ring``: rank i sends to i+1 (the ring all-reduce);
- ``stride``: rank i sends to (i + stride) mod n, the Hedera fat-tree pattern that makes
  every flow cross the core when the stride is a multiple of the hosts per leaf;
- ``random``: a random permutation without fixed points (a derangement), drawn from the
  scenario's seed, so every seed gives a different but reproducible set of elephants.

Every pattern is a permutation, so each rank receives from exactly one other rank.
"""

from __future__ import annotations

import random

PATTERNS = ("ring", "stride", "random")


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
