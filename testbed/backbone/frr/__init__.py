"""FRRouting daemons, one small module each with its config template beside it."""

from .bfdd import Bfdd
from .bgpd import BASE_ASN, Bgpd
from .daemon import FrrConfigError, FrrDaemon, vtysh
from .ospfd import Ospfd
from .router import BgpNeighbor, Router, RouterInterface, RouterPaths, Timers
from .zebra import Zebra

#: start order: every daemon after the ones it depends on (the default set: OSPF + BFD)
DAEMONS: tuple[type[FrrDaemon], ...] = (Zebra, Bfdd, Ospfd)
#: every daemon a scenario can name in ``backbone.daemons``, in start order
ALL_DAEMONS: dict[str, type[FrrDaemon]] = {d.NAME: d for d in (Zebra, Bfdd, Ospfd, Bgpd)}
#: the routing protocols (a backbone runs exactly one)
PROTOCOLS = ("ospfd", "bgpd")


def daemon_classes(names: list[str] | tuple[str, ...]) -> tuple[type[FrrDaemon], ...]:
    """The daemons named, in start order (dependencies first).

    >>> [d.NAME for d in daemon_classes(["bgpd", "zebra", "bfdd"])]
    ['zebra', 'bfdd', 'bgpd']
    """
    return tuple(cls for name, cls in ALL_DAEMONS.items() if name in names)


__all__ = ["ALL_DAEMONS", "BASE_ASN", "DAEMONS", "PROTOCOLS", "Bfdd", "BgpNeighbor", "Bgpd",
           "FrrConfigError", "FrrDaemon", "Ospfd", "Router", "RouterInterface",
           "RouterPaths", "Timers", "Zebra", "daemon_classes", "vtysh"]
