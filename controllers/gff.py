"""Global first fit (Hedera, Al-Fares et al., NSDI'10, section 4), as pure logic.

Hedera leaves every flow on its ECMP hash until the edge switch's counters show it is an
elephant (above ``elephant_mbps``, Hedera's 10 % of the NIC rate). Then the scheduler
estimates every elephant's *natural demand*, the rate it would get if only the hosts'
NICs limited it (:func:`estimate_demands`: TCP's rate on a congested path says nothing
about what the flow wants), and places each elephant not placed yet on the first path,
in a fixed order of all the equal-cost paths from its edge switch to its destination,
whose every link still has room for that demand (:func:`first_fit`). The path's links
keep the demand reserved while the flow lives. An elephant no path fits stays on its
hash and is tried again at the next round. Placed flows are never moved: first fit, not
a global optimum (Hedera's simulated annealing is the other scheduler, not built here).

Here a scheduling round follows each reply to an edge switch's flow-stats request (about
every ``adaptive.interval_ms``, at least :data:`controllers.adaptive.FLOW_POLL_S`) that
shows an elephant not placed yet, not Hedera's fixed 5 s: the lab's runs last seconds,
not minutes. Each such round recomputes the reservations from the current demand
estimates (a flow's estimate falls when another elephant of its host appears), so a
path is judged by what its flows want now.

Demands are fractions of the host link rate (1.0: a whole NIC); every link of the
fabric has that rate (a fat-tree's, a 1:1 leaf-spine's).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass, field

#: a link as the controller names it: (datapath id, port)
Link = tuple[int, int]
#: a little slack so demands that add up to exactly one link still fit after rounding
EPSILON = 1e-6


def estimate_demands(flows: Sequence[tuple[Hashable, Hashable]]) -> list[float]:
    """Each flow's natural demand (fraction of a NIC): max-min fair under the senders'
    and receivers' NIC limits alone (Hedera's estimator, its Figure 7).

    Senders share their NIC equally among their flows that are not yet fixed elsewhere;
    a receiver asked for more than its NIC gives every flow asking more than an equal
    share of what the smaller ones leave exactly that share, and fixes it; repeat until
    nothing changes.

    >>> estimate_demands([("a", "x"), ("b", "y")])  # disjoint pairs: a NIC each
    [1.0, 1.0]
    >>> estimate_demands([("a", "x"), ("a", "y")])  # one sender, two flows: half each
    [0.5, 0.5]
    >>> estimate_demands([("a", "x"), ("b", "x"), ("c", "x"), ("c", "y")])
    [0.3333, 0.3333, 0.3333, 0.6667]
    """
    n = len(flows)
    demand = [0.0] * n
    converged = [False] * n
    by_src: dict[Hashable, list[int]] = {}
    by_dst: dict[Hashable, list[int]] = {}
    for i, (src, dst) in enumerate(flows):
        by_src.setdefault(src, []).append(i)
        by_dst.setdefault(dst, []).append(i)
    for _ in range(4 * n + 4):  # converges in a few rounds; the bound only guards
        before = (list(demand), list(converged))
        for members in by_src.values():
            fixed = sum(demand[i] for i in members if converged[i])
            free = [i for i in members if not converged[i]]
            for i in free:
                demand[i] = max(0.0, 1.0 - fixed) / len(free)
        for members in by_dst.values():
            if sum(demand[i] for i in members) <= 1.0 + EPSILON:
                continue
            limited = set(members)
            share = 1.0 / len(limited)
            while True:
                small = {i for i in limited if demand[i] < share}
                if not small:
                    break
                limited -= small
                if not limited:
                    break
                share = (1.0 - sum(demand[i] for i in members if i not in limited)) / len(limited)
            for i in limited:
                demand[i] = share
                converged[i] = True
        if (demand, converged) == before:
            break
    return [round(d, 4) for d in demand]


def first_fit(paths: Sequence[Sequence[Link]], reserved: dict[Link, float],
              demand: float) -> int | None:
    """The index of the first path whose every link has room for ``demand`` on top of
    what is ``reserved`` on it (fractions of the link rate), or None.

    >>> first_fit([[(1, 3), (5, 1)], [(1, 4), (6, 1)]], {(5, 1): 0.6}, 0.5)
    1
    >>> first_fit([[(1, 3)], [(1, 4)]], {(1, 3): 0.6, (1, 4): 0.9}, 0.5) is None
    True
    """
    for i, path in enumerate(paths):
        if all(reserved.get(link, 0.0) + demand <= 1.0 + EPSILON for link in path):
            return i
    return None


@dataclass
class Placement:
    """A placed elephant: the path it was given, its demand this round."""

    path: tuple[Link, ...]
    demand: float = 0.0


@dataclass
class Scheduler:
    """The elephants placed so far and their reservations, across every edge switch."""

    placed: dict[Hashable, Placement] = field(default_factory=dict)

    def reserved(self) -> dict[Link, float]:
        """Each link's reserved share: the demands of the elephants placed over it."""
        out: dict[Link, float] = {}
        for p in self.placed.values():
            for link in p.path:
                out[link] = out.get(link, 0.0) + p.demand
        return out

    def forget(self, keys: Iterable[Hashable]) -> None:
        """Release the reservations of flows that ended (their rule idled out)."""
        for key in keys:
            self.placed.pop(key, None)

    def schedule(self, elephants: dict[Hashable, tuple[str, str]],
                 paths: dict[Hashable, Sequence[Sequence[Link]]]
                 ) -> list[tuple[Hashable, int, float]]:
        """One round: demands of every known elephant (``elephants``: key -> (src, dst)
        hosts, the placed ones included), then first fit for each one not placed yet, in
        key order. Returns (key, index into its ``paths``, demand) for the new placements.

        >>> s = Scheduler()
        >>> paths = {"f1": [[(1, 3)], [(1, 4)]], "f2": [[(1, 3)], [(1, 4)]]}
        >>> s.schedule({"f1": ("a", "x"), "f2": ("b", "y")}, paths)
        [('f1', 0, 1.0), ('f2', 1, 1.0)]
        >>> s.schedule({"f1": ("a", "x"), "f2": ("b", "y"), "f3": ("c", "z")},
        ...            {"f3": [[(1, 3)], [(1, 4)]]})  # both paths full: stays on its hash
        []
        """
        keys = sorted(elephants, key=str)
        demands = dict(zip(keys, estimate_demands([elephants[k] for k in keys]), strict=True))
        for key, p in self.placed.items():
            p.demand = demands.get(key, p.demand)
        reserved = self.reserved()
        out = []
        for key in keys:
            if key in self.placed or not paths.get(key):
                continue
            choice = first_fit(paths[key], reserved, demands[key])
            if choice is None:
                continue
            path = tuple(paths[key][choice])
            self.placed[key] = Placement(path, demands[key])
            for link in path:
                reserved[link] = reserved.get(link, 0.0) + demands[key]
            out.append((key, choice, demands[key]))
        return out
