"""A fabric variant: its entry in ``variants`` (:class:`VariantSection`, overrides of
the scenario's sections), the deep merge that applies them, and the fully resolved
variant a run brings up (:class:`Variant`)."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from testbed.experiments.fabric.schema import Name
from testbed.fabric.qos import Qos
from testbed.faults.schedule import Fault
from topologies.build import build_topology, builder_of
from topologies.params import Section
from topologies.spec import FabricSpec


class VariantSection(Section):
    """One entry of ``variants``: a name and overrides of the scenario's sections."""

    name: Name = Field(description="the variant's name (lowercase letters, digits, - or _)")
    reference: bool = Field(False, description="the non-blocking reference to compare with")
    topology: dict[str, Any] | None = Field(None, description="keys merged onto the "
                                                              "scenario's topology section")
    controller: dict[str, Any] | None = Field(None, description="keys merged onto the "
                                                                "controller section")
    agents: dict[str, Any] | None = Field(None, description="keys merged onto the agents "
                                                            "section")
    training: dict[str, Any] | None = Field(None, description="keys merged onto the training "
                                                              "section")
    qos: dict[str, Any] | None = Field(None, description="keys merged onto the qos section")
    switches: dict[str, Any] | None = Field(None, description="keys merged onto the switches "
                                                              "section")
    faults: list[dict[str, Any]] | None = Field(None, description="replaces the scenario's "
                                                                  "faults list")
    workloads: list[dict[str, Any]] | None = Field(
        None, description="replaces the scenario's workloads list")
    capture: list[str] | None = Field(None, description="replaces the scenario's capture "
                                                        "list")
    acceptance: dict[str, Any] | None = Field(None, description="keys merged onto the "
                                                                "acceptance section")
    replacement: dict[str, Any] | None = Field(None, description="keys merged onto the "
                                                                 "replacement section")


@dataclass(frozen=True)
class Variant:
    """One side of a comparison: fully resolved sections plus the topology it builds."""

    name: str
    topology: dict[str, Any]
    controller: dict[str, Any]
    agents: dict[str, Any]
    training: dict[str, Any]
    #: the traffic classes and PFC, parsed once (:class:`testbed.fabric.qos.Qos`)
    qos: Qos = dataclasses.field(default_factory=Qos)
    #: which Open vSwitch processes forward (:class:`testbed.fabric.switchd.SwitchSettings`)
    switches: dict[str, Any] = dataclasses.field(default_factory=dict)
    reference: bool = False  # the non-blocking reference the report compares against
    faults: tuple[Fault, ...] = ()
    #: ``workloads`` entries other than agents and training, host references resolved
    workloads: tuple[dict, ...] = ()
    #: ports captured for the whole variant (short names: ``p0l0e3``, ``n0p0r0``)
    capture: tuple[str, ...] = ()
    #: the acceptance step before the workloads (:mod:`testbed.acceptance.step`)
    acceptance: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: node health and replacement during the run (:mod:`testbed.operations.replace`)
    replacement: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: the fabric the topology builds, named with :data:`SPEC_PREFIX`: built once, when
    #: the variant was checked
    spec: FabricSpec | None = dataclasses.field(default=None, compare=False, repr=False)

    def fabric(self, prefix: str) -> FabricSpec:
        """The variant's fabric with names of ``prefix`` (a run's: built again with them;
        :data:`SPEC_PREFIX`: the one built when the variant was checked)."""
        if self.spec is not None and prefix == self.spec.prefix:
            return self.spec
        return build_topology(self.topology, prefix)


def merge(base_: dict, override: dict) -> dict:
    """``override`` deep-merged onto a copy of ``base_`` (mappings key by key, anything
    else replaced)."""
    out = copy.deepcopy(base_)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def merge_topology(base_: dict, override: dict) -> dict:
    """A variant's topology: merged onto the base's, unless it names another builder
    (then the base's parameters, made for that other builder, do not apply)."""
    names_one = "builder" in override or isinstance(override.get("nodes"), dict)
    if names_one and builder_of(override) != builder_of(base_):
        return copy.deepcopy(override)
    return merge(base_, override)

