"""The ``acceptance:`` section of a fabric scenario as data (its step, the checks and the
planted faults: :mod:`testbed.acceptance.step`). Validation reads only this: it loads
no netlink or packet library."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from topologies.params import Section

CHECK_NAMES = ("cabling", "links", "paths", "system")
PLANT_KINDS = ("rate", "degrade", "swap_rails", "throttle", "link_down")


class Plant(Section):
    """A fault made in the fabric before acceptance (and before any workload)."""

    action: Literal[PLANT_KINDS] = Field(  # type: ignore[valid-type]
        description="rate (a link trained down), degrade (a lossy port), swap_rails (two "
                    "NICs' cables swapped), throttle (a NIC that slows under sustained "
                    "load), link_down (a dead cable)")
    target: str = Field("random", description="a link (p0l0-p0s1, n3-p0l0) or a NIC "
                                              "(n3p0r0), or random: drawn with the seed")
    rate_fraction: float | None = Field(None, gt=0, lt=1, description="rate, throttle: "
                                                                      "of the link's rate")
    loss: float | None = Field(None, ge=0.001, le=1.0, description="degrade: fraction lost")
    burst_kb: float | None = Field(None, gt=0, le=1000000, description="throttle: KB at full "
                                   "rate after idle (default: half a second at the link's rate)")


class Acceptance(Section):
    """Acceptance before the workloads (:mod:`testbed.acceptance`)."""

    enabled: bool = Field(False, description="run the checks before the workloads")
    checks: list[Literal[CHECK_NAMES]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(CHECK_NAMES), min_length=1,
        description="which checks, run in their fixed order")
    exclude: bool = Field(True, description="what the checks exclude leaves the ECMP sets "
                                            "and the workloads")
    spares: list[int] = Field(default_factory=list, description="node indices that take "
                                                                "over excluded nodes' roles")
    plant: list[Plant] = Field(default_factory=list, description="faults made before the "
                                                                 "checks")
