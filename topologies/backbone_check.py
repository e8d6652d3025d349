"""The design rule of the backbone, checked by max-flow over its PoP graph.

Rule: every PoP has at least ``paths`` (4) physically separate paths to at least
``peers`` (2) other PoPs, and every region is attached to at least two PoPs.

"Physically separate" means the paths share no link and no shared-risk group: every
link maps to its *risk units*, its own name plus every group that carries it, and two
paths are separate when their units do not meet. Two fibre pairs in one cable share
that cable's unit and so never count twice. A cheap bound runs first: a PoP whose links
carry fewer than ``paths`` distinct units fails at once.

Method (Menger): separate paths between two PoPs are a flow. A link is an edge of
capacity 1 (parallel links add up); a risk group of several links becomes one node of
capacity 1 that every end of its links reaches (a path that enters the group leaves it
at any end of its links: in the real backbone it walks the group's own links there, so
at most one path uses the group). The largest flow, stopped at ``want``, is the count,
in polynomial time. That model is exact when every group's links hang together and no
link is in two groups of several links (every shipped backbone).

Otherwise (a group whose links fall apart, a link in two groups) the question is
NP-hard in general, and bounded instead: a link in two groups splits it (no path uses
the link, or its groups are one: the path that uses it is the only one that touches
any of them); of a group that falls apart, the one path that touches it stays within
one piece (each piece tried) or touches several, and then the others keep out of it
(at most one more than the flow without it). Where these flows leave a gap, every
simple path is enumerated (the sets of risk units they use, the smallest ones, a
packing of disjoint ones). The steps of one check are capped at :data:`MAX_WORK`
(:class:`DesignLimit` past it, naming the risk groups) and the graph at
:data:`MAX_POPS` PoPs, :data:`MAX_LINKS` links and :data:`MAX_GROUPS` groups, so that
the flows alone stay below that cap: a check of any backbone the lab accepts ends
in about a second here at most.

>>> from topologies.backbone import default_backbone
>>> check = design_check(default_backbone())
>>> check.ok, check.pops["sin"]["peers"][:2], check.pops["sin"]["independent_exits"]
(True, ['ams', 'ash'], 4)
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import networkx as nx

from topologies.backbone import Backbone, Link

PATHS = 4
PEERS = 2
MIN_HOMES = 2
#: the largest backbone the design check takes: PoPs, PoP-PoP links, risk groups
MAX_POPS = 32
MAX_LINKS = 128
MAX_GROUPS = 64
#: steps (arcs a flow search looks at, links a path search takes) of one design check
MAX_WORK = 4_500_000


class DesignError(ValueError):
    """The backbone breaks the design rule; ``node`` names the PoP or region."""

    def __init__(self, node: str, reason: str):
        super().__init__(f"{node}: {reason}")
        self.node = node
        self.reason = reason


class DesignLimit(ValueError):
    """The backbone is beyond what the design check takes (``field``: ``pops``,
    ``links`` or ``risk_groups``)."""

    def __init__(self, field: str, reason: str):
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


@dataclass
class DesignCheck:
    """Outcome of :func:`design_check`: per PoP the peers reached, per region the homes."""

    ok: bool
    pops: dict[str, dict] = field(default_factory=dict)
    regions: dict[str, dict] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    method: str = ("link- and risk-group-disjoint paths: max-flow over the PoP multigraph, "
                   "a risk group a node of capacity 1 (exact where groups hang together and "
                   "do not overlap; elsewhere flows that bound the count, then a search "
                   "capped in steps)")

    def to_dict(self) -> dict:
        return {"ok": self.ok, "rule": f"{PATHS} separate paths to >= {PEERS} PoPs, "
                f"regions homed to >= {MIN_HOMES} PoPs", "method": self.method,
                "pops": self.pops, "regions": self.regions, "errors": self.errors}


def risk_units(bb: Backbone, link: Link) -> frozenset[str]:
    """The link itself plus every shared-risk group that carries it."""
    return frozenset({"link:" + link.name} | {"srlg:" + g.name for g in bb.groups_of(link.name)})


def pop_graph(bb: Backbone) -> nx.MultiGraph:
    """PoPs as nodes, one edge per PoP-PoP link (key: link name, attribute ``units``)."""
    g = nx.MultiGraph()
    g.add_nodes_from(p.name for p in bb.pops)
    for lk in bb.links:
        g.add_edge(lk.a, lk.b, key=lk.name, units=risk_units(bb, lk))
    return g


def limits(bb: Backbone) -> None:
    """:class:`DesignLimit` when ``bb`` is larger than the design check takes."""
    for name, count, most, what in (("pops", len(bb.pops), MAX_POPS, "PoPs"),
                                    ("links", len(bb.links), MAX_LINKS, "PoP-PoP links"),
                                    ("risk_groups", len(bb.risk_groups), MAX_GROUPS,
                                     "risk groups")):
        if count > most:
            raise DesignLimit(name, f"at most {most} {what} (the design check's work grows "
                                    f"with them), got {count}")


class _Work:
    """The steps a design check has taken, against :data:`MAX_WORK`."""

    def __init__(self, limit: int | None = None):
        self.limit, self.steps = MAX_WORK if limit is None else limit, 0

    def spend(self, steps: int) -> None:
        self.steps += steps
        if self.steps > self.limit:
            raise DesignLimit("risk_groups", f"the design check gave up after {self.limit} "
                              "steps: risk groups whose links do not meet, or links in two "
                              "groups of several links, make counting separate paths a "
                              "search (split such a group into ones whose links meet, or "
                              "keep a link in one group)")


class _Network:
    """A flow network on integer nodes: arcs in pairs (an arc and its reverse, ``i ^ 1``)."""

    def __init__(self, nodes: int):
        self.head: list[int] = []
        self.cap: list[int] = []
        self.adj: list[list[int]] = [[] for _ in range(nodes)]

    def add(self, u: int, v: int, cap: int, back: int) -> None:
        """An arc u -> v of ``cap`` (and v -> u of ``back``: ``cap`` too for an edge)."""
        self.adj[u].append(len(self.head))
        self.head.append(v)
        self.cap.append(cap)
        self.adj[v].append(len(self.head))
        self.head.append(u)
        self.cap.append(back)

    def flow(self, s: int, t: int, want: int, work: _Work) -> int:
        """The largest flow s -> t, stopped at ``want`` (shortest augmenting paths)."""
        residual, head, adj = self.cap[:], self.head, self.adj
        total = 0
        while total < want:
            parent = {s: -1}
            queue = deque([s])
            seen = 0
            while queue and t not in parent:
                u = queue.popleft()
                arcs = adj[u]
                seen += len(arcs)
                for arc in arcs:
                    v = head[arc]
                    if residual[arc] > 0 and v not in parent:
                        parent[v] = arc
                        queue.append(v)
            work.spend(seen + 1)
            if t not in parent:
                break
            push, v = want - total, t
            while v != s:
                arc = parent[v]
                push = min(push, residual[arc])
                v = head[arc ^ 1]
            v = t
            while v != s:
                arc = parent[v]
                residual[arc] -= push
                residual[arc ^ 1] += push
                v = head[arc ^ 1]
            total += push
        return total


def _pieces(ends: Sequence[tuple[int, int]], chosen: Sequence[int]) -> list[list[int]]:
    """The links ``chosen`` (indices into ``ends``) in pieces that hang together."""
    parent: dict[int, int] = {}

    def root(x: int) -> int:
        while parent.setdefault(x, x) != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i in chosen:
        a, b = ends[i]
        parent[root(a)] = root(b)
    out: dict[int, list[int]] = {}
    for i in chosen:
        out.setdefault(root(ends[i][0]), []).append(i)
    return list(out.values())


class _Paths:
    """Separate paths between the PoPs of one graph: ``nodes`` PoPs, ``links`` their two
    ends and risk units each. A risk group is the set of links that carry its unit (one
    of several links: a unit of one link is as good as the link's own)."""

    def __init__(self, nodes: int, links: Sequence[tuple[int, int, frozenset[str]]],
                 work: _Work | None = None):
        self.nodes, self.work = nodes, work or _Work()
        # a link from a PoP to itself lies on no path
        self.links = [(a, b, units) for a, b, units in links if a != b]
        self.ends = [(a, b) for a, b, _ in self.links]
        self.work.spend(sum(len(units) for _, _, units in self.links))
        members: dict[str, set[int]] = {}
        for i, (_, _, units) in enumerate(self.links):
            for unit in units:
                members.setdefault(unit, set()).add(i)
        self.groups = self._plain_groups([frozenset(ix) for ix in members.values()])
        self.cache: dict[tuple[int, int, int], int] = {}
        self.networks: dict[tuple[frozenset[int], tuple[frozenset[int], ...]], _Network] = {}
        self.shapes: dict[tuple[frozenset[int], ...], tuple[int | None,
                                                            frozenset[int] | None]] = {}

    def _plain_groups(self, groups: Sequence[frozenset[int]]) -> list[frozenset[int]]:
        """``groups`` of several links, each once, none within another (a path that keeps
        out of the larger one keeps out of the smaller)."""
        out: list[frozenset[int]] = []
        for g in sorted({g for g in groups if len(g) > 1}, key=lambda g: (-len(g), sorted(g))):
            self.work.spend(len(out) + len(g))
            if not any(g <= kept for kept in out):
                out.append(g)
        return out

    def _network(self, present: frozenset[int], groups: Sequence[frozenset[int]]
                 ) -> _Network:
        """The links ``present`` outside every group as edges (parallel ones summed); each
        group one node of capacity 1 (an in and an out) that the ends of its links reach
        and are reached from; a link in several groups counts in the first only. Built
        once for every pair of PoPs that asks."""
        key = (present, tuple(groups))
        if key not in self.networks:
            self.networks[key] = self._build(present, groups)
        return self.networks[key]

    def _build(self, present: frozenset[int], groups: Sequence[frozenset[int]]) -> _Network:
        net = _Network(self.nodes + 2 * len(groups))
        done: set[int] = set()
        for j, g in enumerate(groups):
            mine = sorted(g - done)
            done |= g
            into, out = self.nodes + 2 * j, self.nodes + 2 * j + 1
            net.add(into, out, 1, 0)
            for x in sorted({end for i in mine for end in self.ends[i]}):
                net.add(x, into, 1, 0)
                net.add(out, x, 1, 0)
        pairs: dict[tuple[int, int], int] = {}
        for i in present - done:
            a, b = sorted(self.ends[i])
            pairs[a, b] = pairs.get((a, b), 0) + 1
        for (a, b), n in sorted(pairs.items()):
            net.add(a, b, n, n)
        self.work.spend(4 * len(net.head) + len(net.adj))  # a build costs more than a look
        return net

    def count(self, p: int, q: int, want: int) -> int:
        """Separate paths p -> q, counted up to ``want``."""
        key = (min(p, q), max(p, q), want)
        if key not in self.cache:
            everything = frozenset(range(len(self.links)))
            low, high = self._bounds(p, q, want, everything, self.groups, 0, plain=True)
            self.cache[key] = (low if low >= high else
                               self._exact(p, q, low, high, everything, self.groups))
        return self.cache[key]

    def _bounds(self, p: int, q: int, want: int, present: frozenset[int],
                groups: Sequence[frozenset[int]], low: int, plain: bool = False
                ) -> tuple[int, int]:
        """Bounds on the count over the links ``present`` under ``groups`` (at most one
        path touches each), the lower one at least ``low``; equal where flows settle it.

        A link in two groups splits the question: no path uses it, or its groups are one
        (the path that uses it is the only one that touches any of them); the count is
        the larger answer. Groups that share no link and hang together: the flow is the
        count. The one path that touches a group that falls apart either stays within one
        of its pieces (each piece tried, the others left out) or touches several, and
        then every other path keeps out of the group: at most one more than the flow
        without it."""
        if not plain:
            groups = self._plain_groups([g & present for g in groups])
        upper = self._network(present, groups).flow(p, q, want, self.work)
        if upper <= low:
            return low, low
        shared, apart = self._shape(groups)
        if shared is not None:
            theirs = [g for g in groups if shared in g]
            one = [g for g in groups if shared not in g] + [frozenset().union(*theirs)]
            low, high = self._bounds(p, q, want, present, one, low)
            if low < upper:
                low, other = self._bounds(p, q, want, present - {shared}, groups, low)
                high = max(high, other)
            return low, min(high, upper)
        if apart is None:
            return upper, upper
        others = [g for g in groups if g is not apart]
        high = 0
        for piece in sorted(_pieces(self.ends, sorted(apart)), key=len, reverse=True):
            low, other = self._bounds(p, q, want, present - (apart - set(piece)),
                                      [*others, frozenset(piece)], low)
            high = max(high, other)
            if low >= upper:
                return low, low
        several = 1 + self._network(present - apart, others).flow(p, q, want - 1, self.work)
        return low, max(low, min(upper, max(high, several)))

    def _shape(self, groups: Sequence[frozenset[int]]) -> tuple[int | None,
                                                               frozenset[int] | None]:
        """A link in two of ``groups`` (the lowest), else a group whose links fall apart
        (the first), else neither; found once for every pair of PoPs that asks."""
        key = tuple(groups)
        if key not in self.shapes:
            self.work.spend(sum(len(g) for g in groups) + 1)
            seen: set[int] = set()
            shared = None
            for g in groups:
                if seen & g:
                    shared = min(seen & g)
                    break
                seen |= g
            apart = None if shared is not None else next(
                (g for g in groups if len(_pieces(self.ends, sorted(g))) > 1), None)
            self.shapes[key] = (shared, apart)
        return self.shapes[key]

    def _exact(self, p: int, q: int, low: int, high: int, present: frozenset[int],
               groups: Sequence[frozenset[int]]) -> int:
        """The count (known to be ``low``..``high``) from every simple path p -> q over the
        links ``present``: the risk units each uses (its links and their ``groups``), the
        smallest such sets, and the most of them that are pairwise disjoint (a packing)."""
        n = len(self.links)
        masks = {i: (1 << i) | sum(1 << (n + j) for j, g in enumerate(groups) if i in g)
                 for i in present}
        self.work.spend(len(present) * (len(groups) + 1))
        adj: dict[int, list[tuple[int, int]]] = {}
        for i in self._on_some_path(p, q, present):
            a, b = self.ends[i]
            adj.setdefault(a, []).append((b, masks[i]))
            adj.setdefault(b, []).append((a, masks[i]))

        def pack(sets: list[int], start: int, used: int, need: int) -> bool:
            """``need`` pairwise disjoint sets of ``sets[start:]``, none meeting ``used``?"""
            if need == 0:
                return True
            for i in range(start, len(sets)):
                self.work.spend(1)
                if not sets[i] & used and pack(sets, i + 1, used | sets[i], need - 1):
                    return True
            return False

        # every simple path whose units hold no other path's (a larger set is of no use
        # to a packing), nearest PoPs first so that short paths come early; done as soon
        # as ``high`` of them are disjoint
        far = nx.single_source_shortest_path_length(
            nx.Graph([(a, b) for a, nexts in adj.items() for b, _ in nexts]), q) if adj else {}
        for nexts in adj.values():
            nexts.sort(key=lambda step: far.get(step[0], len(far)))
        smallest: list[int] = []
        on = {p}
        stack = [(p, 0, iter(adj.get(p, ())))]
        while stack:
            u, used, nexts = stack[-1]
            step = next(nexts, None)
            self.work.spend(1 + len(smallest) // 8)
            if step is None:
                stack.pop()
                on.discard(u)
                continue
            v, mask = step
            now = used | mask
            if v in on or any(k & now == k for k in smallest):
                continue
            if v == q:
                smallest = [k for k in smallest if k & now != now]
                if pack(smallest, 0, now, high - 1):
                    return high
                smallest.append(now)
            else:
                on.add(v)
                stack.append((v, now, iter(adj.get(v, ()))))
        return next((k for k in range(high - 1, low, -1) if pack(smallest, 0, 0, k)), low)

    def _on_some_path(self, p: int, q: int, present: frozenset[int]) -> list[int]:
        """The links ``present`` that lie on some simple path p -> q: those of the blocks
        (biconnected components) between p and q in the graph's block tree."""
        g = nx.Graph()
        g.add_nodes_from(range(self.nodes))
        g.add_edges_from(self.ends[i] for i in present)
        self.work.spend(len(present) + self.nodes)
        if not nx.has_path(g, p, q):
            return []
        tree = nx.Graph()
        for b, block in enumerate(nx.biconnected_components(g)):
            tree.add_edges_from((("block", b), ("pop", x)) for x in block)
        between = [n[1] for n in nx.shortest_path(tree, ("pop", p), ("pop", q))
                   if n[0] == "block"]
        nodes = [{n[1] for n in tree[("block", b)]} for b in between]
        return [i for i in sorted(present)
                if any(self.ends[i][0] in block and self.ends[i][1] in block
                       for block in nodes)]


def separate_paths(g: nx.MultiGraph, p: str, q: str, want: int = PATHS) -> int:
    """Link- and risk-group-disjoint paths ``p`` -> ``q`` of a :func:`pop_graph`, counted
    up to ``want``."""
    index = {name: i for i, name in enumerate(g.nodes)}
    links = [(index[a], index[b], units) for a, b, units in g.edges(data="units")]
    return _Paths(len(index), links).count(index[p], index[q], want)


def design_check(bb: Backbone, paths: int = PATHS, peers: int = PEERS) -> DesignCheck:
    """Check the rule for every PoP and region (see :func:`require`); raises only
    :class:`DesignLimit`, for a backbone beyond what the check takes."""
    limits(bb)
    g = pop_graph(bb)
    index = {name: i for i, name in enumerate(g.nodes)}
    counter = _Paths(len(index), [(index[a], index[b], units)
                                  for a, b, units in g.edges(data="units")])
    check = DesignCheck(ok=True)
    for pop in (p.name for p in bb.pops):
        out_units = set()
        for _, _, units in g.edges(pop, data="units"):
            out_units |= units
        groups = {u for u in out_units if u.startswith("srlg:")}
        bare = {u for u in out_units
                if u.startswith("link:") and not any(
                    u[5:] in bb.group(s[5:]).links for s in groups)}
        independent = len(groups) + len(bare)
        counts: dict[str, int] = {}
        if independent >= paths:
            for q in (x.name for x in bb.pops if x.name != pop):
                counts[q] = counter.count(index[pop], index[q], paths)
        reached = sorted(q for q, n in counts.items() if n >= paths)
        entry = {"independent_exits": independent, "separate_paths": counts,
                 "peers": reached, "ok": len(reached) >= peers}
        check.pops[pop] = entry
        if not entry["ok"]:
            check.ok = False
            if independent < paths:
                why = (f"PoP {pop} has only {independent} independent exits (links and "
                       f"risk groups), needs {paths} separate paths")
            else:
                why = (f"PoP {pop} reaches {len(reached)} PoP(s) "
                       f"({', '.join(reached) or 'none'}) over {paths} separate paths, "
                       f"needs {peers}")
            check.errors.append(why)
    pop_names = {p.name for p in bb.pops}
    for region in bb.regions:
        homes = sorted(set(region.pops) & pop_names)
        ok = len(homes) >= MIN_HOMES and len(homes) == len(set(region.pops))
        check.regions[region.name] = {"pops": homes, "ok": ok}
        if not ok:
            check.ok = False
            check.errors.append(f"region {region.name} is attached to {len(homes)} known "
                                f"PoP(s) ({', '.join(region.pops)}), needs {MIN_HOMES}")
    return check


def require(bb: Backbone, paths: int = PATHS, peers: int = PEERS) -> DesignCheck:
    """:func:`design_check`, raising :class:`DesignError` naming the first failing node."""
    check = design_check(bb, paths, peers)
    for pop, entry in check.pops.items():
        if not entry["ok"]:
            raise DesignError(pop, next(e for e in check.errors if f"PoP {pop} " in e))
    for region, entry in check.regions.items():
        if not entry["ok"]:
            raise DesignError(region, next(e for e in check.errors if f"region {region} " in e))
    return check
