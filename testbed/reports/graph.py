"""Draw a scenario's topology: a graph built from the spec, as DOT, Mermaid or a PNG.

Fabric: hosts at the bottom, switches in tiers by role (``leaf`` under ``spine``; the
spec's ``tier`` of a switch, counted from the hosts' switches, wins, and roles it does not know are
drawn above the known ones), planes as colours, link rates as labels. Backbone: PoPs
(coloured by area) and regions, links labelled with their length and capacity, subsea
links blue, terrestrial brown, access grey.

>>> from topologies.leafspine import build_fabric
>>> g = fabric_graph(build_fabric(prefix="tb0000", planes=1, nodes=2, leaves_per_plane=1,
...                               spines_per_plane=1, link_mbps=100))
>>> sorted(g.nodes), sorted({d["label"] for _, _, d in g.edges(data=True)})
(['n0', 'n1', 'p0l0', 'p0s0'], ['100 Mb/s', '200 Mb/s'])
>>> print(to_dot(g, "tiny").splitlines()[-2])
  "p0l0" -- "p0s0" [label="200 Mb/s", color="#1f77b4"];
"""

from __future__ import annotations

import re
from pathlib import Path

import networkx as nx

from testbed.host.naming import SPEC_PREFIX

#: tiers of the roles the testbed knows (hosts are tier 0)
ROLE_TIERS = {"tor": 1, "leaf": 1, "agg": 2, "aggregation": 2, "spine": 2,
              "superspine": 3, "core": 3}
PLANE_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
                 "#e377c2", "#7f7f7f")
PLANE_FILLS = ("#aec7e8", "#ffbb78", "#98df8a", "#ff9896", "#c5b0d5", "#c49c94",
               "#f7b6d2", "#c7c7c7")
AREA_FILLS = {"na": "#aec7e8", "eu": "#98df8a", "me": "#ffbb78", "apac": "#ff9896"}
LINK_COLOURS = {"subsea": "#1f77b4", "terrestrial": "#8c564b", "access": "#999999"}
HOST_FILL = "#eeeeee"


def rate(mbps: float) -> str:
    """A link rate as people write it.

    >>> rate(100), rate(400.0), rate(25000), rate(12.5)
    ('100 Mb/s', '400 Mb/s', '25 Gb/s', '12.5 Mb/s')
    """
    return f"{mbps / 1000:g} Gb/s" if mbps >= 1000 else f"{mbps:g} Mb/s"


def _short(prefix: str, name: str) -> str:
    return name[len(prefix):] if name.startswith(prefix) else name


def fabric_graph(spec) -> nx.MultiGraph:
    """The spec as a graph: nodes with ``kind``, ``role``, ``tier``, ``plane``; edges
    with ``mbps``, ``plane``, ``kind``; short names."""
    g = nx.MultiGraph(kind="fabric")
    for host in spec.hosts:
        g.add_node(_short(spec.prefix, host.name), kind="host", role="host", tier=0,
                   plane=None, label=_short(spec.prefix, host.name))
    extra: dict[str, int] = {}
    top = max(ROLE_TIERS.values())
    for sw in spec.switches:
        tier = getattr(sw, "tier", None)  # the spec's tiers start at 0 (hosts' switches)
        if isinstance(tier, int):
            tier += 1
        else:
            tier = ROLE_TIERS.get(sw.role)
            if tier is None:
                tier = extra.setdefault(sw.role, top + 1 + len(extra))
        name = _short(spec.prefix, sw.name)
        plane = getattr(sw, "plane", None)
        label = f"{name}\\n{sw.role}" + (f" p{plane}" if plane is not None else "")
        g.add_node(name, kind="switch", role=sw.role, tier=tier, plane=plane, label=label)
    for lk in spec.links:
        g.add_edge(_short(spec.prefix, lk.a), _short(spec.prefix, lk.b), mbps=lk.mbps,
                   plane=getattr(lk, "plane", None), kind=lk.kind, label=rate(lk.mbps))
    return g


def backbone_graph(bb) -> nx.MultiGraph:
    """A backbone as a graph: PoPs (``area``) and regions; links with km and capacity."""
    g = nx.MultiGraph(kind="backbone")
    for pop in bb.pops:
        g.add_node(pop.name, kind="pop", role="pop", tier=1, area=pop.area,
                   label=f"{pop.name}\\n{pop.area}")
    for region in bb.regions:
        g.add_node(region.name, kind="region", role="region", tier=0, area=None,
                   label=region.name)
    for lk in bb.all_links:
        g.add_edge(lk.a, lk.b, name=lk.name, kind=lk.kind, km=lk.length_km,
                   mbps=lk.capacity_mbps, label=f"{lk.length_km:g} km, {rate(lk.capacity_mbps)}")
    return g


def _fill(data: dict) -> str:
    if data["kind"] == "host":
        return HOST_FILL
    if data["kind"] in ("pop", "region"):
        return AREA_FILLS.get(data.get("area") or "", HOST_FILL)
    plane = data.get("plane")
    return PLANE_FILLS[plane % len(PLANE_FILLS)] if plane is not None else "#ffffff"


def _edge_colour(data: dict) -> str:
    if "km" in data:
        return LINK_COLOURS.get(data["kind"], "#333333")
    plane = data.get("plane")
    return PLANE_COLOURS[plane % len(PLANE_COLOURS)] if plane is not None else "#333333"


def _shape(data: dict) -> str:
    return {"host": "box", "region": "box", "pop": "doublecircle"}.get(data["kind"], "ellipse")


def to_dot(g: nx.MultiGraph, name: str) -> str:
    """Graphviz DOT text: one rank a tier (fabric) and the links with their labels."""
    lines = [f'graph "{name}" {{',
             '  rankdir=BT; splines=line; node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']
    if g.graph.get("kind") == "backbone":
        lines[1] = '  layout=neato; overlap=false; node [fontname="Helvetica", fontsize=10];'
    tiers: dict[int, list[str]] = {}
    for node, data in g.nodes(data=True):
        tiers.setdefault(data["tier"], []).append(
            f'"{node}" [shape={_shape(data)}, style=filled, fillcolor="{_fill(data)}", '
            f'label="{data["label"]}"];')
    for tier in sorted(tiers):
        if g.graph.get("kind") == "backbone":
            lines += [f"  {n}" for n in tiers[tier]]
        else:
            lines += ["  { rank=same;", *(f"    {n}" for n in tiers[tier]), "  }"]
    for a, b, data in g.edges(data=True):
        style = ", style=dashed" if data.get("kind") == "access" else ""
        lines.append(f'  "{a}" -- "{b}" [label="{data["label"]}", '
                     f'color="{_edge_colour(data)}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"


def _mermaid_id(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def to_mermaid(g: nx.MultiGraph, name: str) -> str:
    """Mermaid flowchart text (renders in GitHub and GitLab Markdown).

    >>> from topologies.backbone import small_backbone
    >>> text = to_mermaid(backbone_graph(small_backbone()), "small")
    >>> text.splitlines()[1], "linkStyle 0 stroke:" in text
    ('  %% small', True)
    """
    lines = ["graph BT" if g.graph.get("kind") != "backbone" else "graph LR", f"  %% {name}"]
    for node, data in g.nodes(data=True):
        label = data["label"].replace("\\n", "<br/>")
        shape = {"box": ('["', '"]'), "doublecircle": ('(("', '"))')}.get(
            _shape(data), ('("', '")'))
        lines.append(f"  {_mermaid_id(node)}{shape[0]}{label}{shape[1]}")
    styles = []
    for i, (a, b, data) in enumerate(g.edges(data=True)):
        lines.append(f'  {_mermaid_id(a)} ---|"{data["label"]}"| {_mermaid_id(b)}')
        styles.append(f"  linkStyle {i} stroke:{_edge_colour(data)}")
    for node, data in g.nodes(data=True):
        styles.append(f"  style {_mermaid_id(node)} fill:{_fill(data)}")
    return "\n".join(lines + styles) + "\n"


def natural(name: str) -> tuple:
    """Sort key that orders numbers in names by value: n2 before n10.

    >>> sorted(["n10", "n2", "p0l1", "n1"], key=natural)
    ['n1', 'n2', 'n10', 'p0l1']
    """
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def _fabric_positions(g: nx.MultiGraph) -> dict:
    """Switches tier by tier, by plane then name in natural order; each host under the
    switch it hangs off (its lowest-plane one), so no host link crosses another's."""
    tiers: dict[int, list[str]] = {}
    for node, data in g.nodes(data=True):
        tiers.setdefault(data["tier"], []).append(node)
    pos = {}
    for tier in sorted(t for t in tiers if t > 0):
        nodes = sorted(tiers[tier], key=lambda n: (g.nodes[n].get("plane") or 0, natural(n)))
        for i, node in enumerate(nodes):
            pos[node] = ((i + 0.5) / len(nodes), tier)

    def under(host: str) -> tuple:
        ups = [n for n in g.neighbors(host) if n in pos]
        first = min(ups, key=lambda n: (g.nodes[n].get("plane") or 0, pos[n][0]), default=None)
        return (pos[first][0] if first else 0.0, natural(host))

    hosts = sorted(tiers.get(0, []), key=under)
    for i, node in enumerate(hosts):
        pos[node] = ((i + 0.5) / len(hosts), 0)
    return pos


AREA_ORDER = ("na", "eu", "me", "apac")


def _backbone_positions(g: nx.MultiGraph) -> dict:
    """PoPs in columns by area (west to east), each region below the PoPs it homes to."""
    areas: dict[str, list[str]] = {}
    for node, data in g.nodes(data=True):
        if data["kind"] == "pop":
            areas.setdefault(data.get("area") or "", []).append(node)
    order = [a for a in AREA_ORDER if a in areas] + sorted(a for a in areas
                                                            if a not in AREA_ORDER)
    pos = {}
    for x, area in enumerate(order):
        for i, node in enumerate(areas[area]):
            pos[node] = (x + 0.25 * (i % 2), 1.0 + i)
    for node, data in g.nodes(data=True):
        if data["kind"] != "pop":
            homes = [pos[n] for n in g.neighbors(node) if n in pos] or [(0.0, 0.0)]
            pos[node] = (sum(p[0] for p in homes) / len(homes) + 0.12,
                         min(p[1] for p in homes) - 0.7)
    return pos


def to_png(g: nx.MultiGraph, name: str, path: Path) -> Path:
    """The graph drawn with matplotlib (tiers bottom-up for a fabric)."""
    from testbed.reports.plots import plt, save

    backbone = g.graph.get("kind") == "backbone"
    pos = _backbone_positions(g) if backbone else _fabric_positions(g)
    width = max(8.0, min(30.0, 0.45 * max(sum(1 for _ in g.nodes) / 2, 16)))
    fig, ax = plt.subplots(figsize=(width, 6 if not backbone else 8))
    for a, b, data in g.edges(data=True):
        (xa, ya), (xb, yb) = pos[a], pos[b]
        ax.plot([xa, xb], [ya, yb], color=_edge_colour(data), lw=1.0,
                ls="--" if data.get("kind") == "access" else "-", zorder=1)
        if backbone or data.get("kind") != "host":
            ax.annotate(data["label"], ((xa + xb) / 2, (ya + yb) / 2), fontsize=6,
                        ha="center", va="center", color="#333333",
                        bbox={"boxstyle": "round,pad=0.1", "fc": "white", "ec": "none",
                              "alpha": 0.7})
    for node, data in g.nodes(data=True):
        x, y = pos[node]
        marker = {"host": "s", "region": "s", "pop": "o"}.get(data["kind"], "o")
        ax.scatter([x], [y], s=900, marker=marker, color=_fill(data), edgecolors="#333333",
                   zorder=2)
        ax.annotate(data["label"].replace("\\n", "\n"), (x, y), fontsize=6, ha="center",
                    va="center", zorder=3)
    if not backbone:
        host_rates = sorted({d["label"] for _, _, d in g.edges(data=True)
                             if d.get("kind") == "host"})
        ax.set_title(f"{name}: hosts (bottom), switches by tier; colour = plane; host links "
                     f"{', '.join(host_rates)}", fontsize=9)
    else:
        ax.set_title(f"{name}: PoPs (circles, colour = area), regions (squares); blue "
                     "subsea, brown terrestrial, dashed access", fontsize=9)
    ax.axis("off")
    return save(fig, path)


def scenario_graph(sc, variant: str | None = None) -> tuple[nx.MultiGraph, str]:
    """The topology a loaded scenario runs on, and a title: a fabric scenario's variant
    (the first unless named), a backbone's PoPs and regions, a storage run's fabric."""
    from testbed.errors import ConfigError

    if sc.kind == "fabric":
        chosen = sc.variant(variant)
        return fabric_graph(chosen.fabric(SPEC_PREFIX)), f"{sc.name}/{chosen.name}"
    if variant is not None:
        sc.variant(variant)  # the variants share one topology
    if sc.kind == "backbone":
        return backbone_graph(sc.experiment.bb), sc.name
    if sc.kind == "storage":
        return fabric_graph(sc.experiment.spec(SPEC_PREFIX)), sc.name
    raise ConfigError("SCENARIO", f"a {sc.kind} scenario has no topology to draw "
                                  "(fabric, backbone and storage scenarios do)")
