"""FRRouting daemons, one small module each with its config template beside it."""

from .bfdd import Bfdd
from .daemon import FrrConfigError, FrrDaemon, vtysh
from .ospfd import Ospfd
from .router import Router, RouterInterface, RouterPaths, Timers
from .zebra import Zebra

#: start order: every daemon after the ones it depends on
DAEMONS: tuple[type[FrrDaemon], ...] = (Zebra, Bfdd, Ospfd)

__all__ = ["DAEMONS", "Bfdd", "FrrConfigError", "FrrDaemon", "Ospfd", "Router",
           "RouterInterface", "RouterPaths", "Timers", "Zebra", "vtysh"]
