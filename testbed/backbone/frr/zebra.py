"""zebra: the RIB manager that installs the IGP's routes (ECMP included) in the kernel."""

from __future__ import annotations

from .daemon import FrrDaemon, template


class Zebra(FrrDaemon):
    NAME = "zebra"
    TEMPLATE = "zebra.conf.tmpl"

    def render(self) -> str:
        return template(self.TEMPLATE).substitute(hostname=self.router.name)
