"""bfdd: sub-second failure detection on every OSPF adjacency (one shared profile)."""

from __future__ import annotations

from .daemon import FrrDaemon, template, vtysh
from .zebra import Zebra

PROFILE = "backbone"


class Bfdd(FrrDaemon):
    NAME = "bfdd"
    TEMPLATE = "bfdd.conf.tmpl"
    DEPENDS = (Zebra,)

    def render(self) -> str:
        t = self.router.timers
        return template(self.TEMPLATE).substitute(
            hostname=self.router.name, profile=PROFILE, multiplier=t.bfd_multiplier,
            interval_ms=t.bfd_ms)

    def ready(self) -> bool:
        """Alive, vty up and registered with zebra as its BFD client.

        zebra drops BFD registrations (from ospfd) that arrive before bfdd has connected,
        and those sessions are never created: the adjacency then falls back to the OSPF
        dead interval. So ospfd is only started once zebra lists the ``bfd`` client.
        """
        if not super().ready():
            return False
        clients = vtysh(self.router, self.paths, "show zebra client summary")
        return any(line.split()[:1] == ["bfd"] for line in clients.splitlines())
