"""The scenario's ``monitor`` key: watch a run live (``testbed run``; labs ask with
``testbed up --monitor``)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from topologies.params import Section


class Watching(Section):
    """Watch the run live: the lab monitor beside each variant's fabric, and a Prometheus."""

    dashboard: bool = Field(False, description="serve each fabric variant's metrics "
                            "(Prometheus text) and its live dashboard on 127.0.0.1 while it "
                            "runs; the address is printed")
    prometheus: bool = Field(False, description="also run a Prometheus server of the run's "
                             "own (Debian's, 127.0.0.1, scraping every second) and write "
                             "Grafana provisioning for it; implies dashboard")
    port: Literal["auto"] | Annotated[int, Field(ge=1, le=65535)] = Field(
        "auto", description="the dashboard's port on 127.0.0.1: auto (a free one) or a "
                            "number")
    keep_samples: bool = Field(True, description="keep Prometheus's samples in the results "
                               "(prometheus-snapshot/: its database, copied when it stopped at "
                               "the variant's end)")

    @property
    def wanted(self) -> bool:
        return self.dashboard or self.prometheus
