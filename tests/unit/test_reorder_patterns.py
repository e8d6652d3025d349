"""Out-of-order placement by PSN, and the elephant traffic patterns."""

from __future__ import annotations

import random

import pytest

from traffic.patterns import derangement, destinations, sources
from traffic.reorder import PSN_MODULO, MessageAssembly, psn_diff


def test_in_order_message() -> None:
    m = MessageAssembly(4)
    for i, psn in enumerate(range(100, 104)):
        assert m.add(psn, first=i == 0, last=i == 3, nbytes=10) == "placed"
    assert m.complete and m.reordered == 0 and m.bytes == 40 and m.missing == 0


def test_shuffled_message_is_complete_with_reorders_counted() -> None:
    psns = list(range(50, 70))
    order = psns[:]
    random.Random(7).shuffle(order)
    m = MessageAssembly(len(psns))
    for psn in order:
        m.add(psn, first=psn == 50, last=psn == 69)
    assert m.complete and m.missing == 0
    late = sum(1 for i, p in enumerate(order) if p < max(order[:i], default=-1))
    assert m.reordered == late > 0


def test_hole_is_missing_not_complete() -> None:
    m = MessageAssembly(3)
    m.add(1, first=True)
    m.add(3, last=True)
    assert not m.complete and m.missing == 1


def test_duplicate_does_not_complete() -> None:
    m = MessageAssembly(3)
    assert m.add(5, first=True) == "placed"
    assert m.add(5) == "duplicate"
    m.add(7, last=True)
    assert not m.complete and m.duplicates == 1


def test_first_psn_from_last_when_first_is_late() -> None:
    m = MessageAssembly(3)
    m.add(11)
    m.add(12, last=True)
    assert not m.complete and m.first_psn == 10
    m.add(10, first=True)
    assert m.complete


def test_wraparound() -> None:
    m = MessageAssembly(3)
    base = PSN_MODULO - 2
    for psn in (0, base, base + 1):
        m.add(psn % PSN_MODULO, first=psn == base, last=psn == 0)
    assert m.complete and m.reordered == 2
    assert psn_diff(0, PSN_MODULO - 1) == 1


def test_stride_crosses_leaves() -> None:
    dest = destinations("stride", 16)
    assert dest == [(i + 8) % 16 for i in range(16)]
    assert all(d // 4 != i // 4 for i, d in enumerate(dest))  # 4 hosts a leaf


def test_stride_explicit_and_invalid() -> None:
    assert destinations("stride", 6, stride=2) == [2, 3, 4, 5, 0, 1]
    with pytest.raises(ValueError, match="itself"):
        destinations("stride", 4, stride=4)


def test_random_is_seeded_derangement() -> None:
    a = destinations("random", 16, seed=1)
    assert a == destinations("random", 16, seed=1)
    assert a != destinations("random", 16, seed=2)
    for seed in range(20):
        p = destinations("random", 16, seed=seed)
        assert sorted(p) == list(range(16)) and all(p[i] != i for i in range(16))
    assert derangement(2, random.Random(0)) == [1, 0]


def test_sources_inverts_and_rejects() -> None:
    dest = destinations("random", 9, seed=5)
    src = sources(dest)
    assert all(src[dest[i]] == i for i in range(9))
    with pytest.raises(ValueError):
        sources([1, 1, 0])
    with pytest.raises(ValueError):
        destinations("hotspot", 4)
