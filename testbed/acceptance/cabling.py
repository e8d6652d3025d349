"""The cabling check: what every link end heard (LLDP, :mod:`.lldp`) against the spec.

A link is accepted when each of its two ends heard exactly the other. Otherwise its
finding names both ends and what each heard instead: nothing (a missing or dead cable),
or another port (a cable in the wrong place; two such findings that heard each other's
peer are a swap). Host links are grouped by rail and plane, fabric links by plane.
"""

from __future__ import annotations

from dataclasses import dataclass

from topologies.spec import FabricSpec, Link, link_name, short


@dataclass(frozen=True)
class Cable:
    """A link's verdict: its name, group (rail or plane), both ends, what each heard."""

    link: str
    group: str
    a: str
    b: str
    a_heard: tuple[str, ...]
    b_heard: tuple[str, ...]

    @property
    def accepted(self) -> bool:
        return self.a_heard == (self.b,) and self.b_heard == (self.a,)

    def reason(self) -> str:
        """Why the cable is excluded ("" when accepted).

        >>> Cable("n0-p0l0", "rail 0", "n0p0r0", "p0l0e1", ("p0l1e1",), ()).reason()
        'n0p0r0 hears p0l1e1, not p0l0e1; p0l0e1 hears nothing, not n0p0r0'
        """
        parts = []
        for me, heard, peer in ((self.a, self.a_heard, self.b), (self.b, self.b_heard, self.a)):
            if heard != (peer,):
                said = ", ".join(heard) if heard else "nothing"
                parts.append(f"{me} hears {said}, not {peer}")
        return "; ".join(parts)


def group_of(spec: FabricSpec, lk: Link) -> str:
    """``rail R, plane P`` for a host link (by its host NIC), ``plane P`` for the rest."""
    if lk.kind == "host":
        nic = spec.host(lk.a).interface_by_name(lk.a_intf)
        return f"rail {nic.rail}, plane {nic.plane}"
    return f"plane {lk.plane}"


def judge(spec: FabricSpec, heard: dict[str, list[str]]) -> list[Cable]:
    """Every link's verdict from what each interface heard (full interface names, both
    as keys and as what was heard; shown short)."""
    def names(ifname: str) -> tuple[str, ...]:
        return tuple(sorted({short(spec, h) for h in heard.get(ifname, [])}))

    return [Cable(link_name(spec, lk), group_of(spec, lk), short(spec, lk.a_intf),
                  short(spec, lk.b_intf), names(lk.a_intf), names(lk.b_intf))
            for lk in spec.links]


def swaps(cables: list[Cable]) -> list[tuple[str, str]]:
    """Pairs of excluded cables whose ends heard each other's peer: two cables swapped.

    >>> c1 = Cable("n0-p0l0", "rail 0", "n0p0r0", "p0l0e1", ("p0l1e1",), ("n0p0r1",))
    >>> c2 = Cable("n0-p0l1", "rail 1", "n0p0r1", "p0l1e1", ("p0l0e1",), ("n0p0r0",))
    >>> swaps([c1, c2])
    [('n0-p0l0', 'n0-p0l1')]
    """
    bad = [c for c in cables if not c.accepted]
    out = []
    for i, x in enumerate(bad):
        for y in bad[i + 1:]:
            if x.a_heard == (y.b,) and y.a_heard == (x.b,):
                out.append((x.link, y.link))
    return out
