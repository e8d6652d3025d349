"""Backbone fault kinds: the fault-kind shape of a fabric's (:class:`FaultKind`, a
registry of one class a kind) for a backbone's targets: a link (``nyc-lon-1``), a
shared-risk group (the fibres of one duct) or a PoP.

Each kind is carried out by the backbone network's method of its name
(:class:`testbed.backbone.net.BackboneNet`: ``cut_link``, ``degrade_link``, ...), so a
kind is its name, its target and its parameters:

>>> KINDS["degrade_link"].TARGET, takes_loss(KINDS["degrade_link"]), list(KINDS)[:2]
('link', True, ['cut_link', 'restore_link'])
>>> sorted(targets(default_backbone(), "pop"))[:3]
['ams', 'ash', 'chi']
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import Field

from testbed.faults.kinds import FaultKind
from topologies import plugins
from topologies.backbone import Backbone, default_backbone  # noqa: F401 (doctest)
from topologies.params import Section


class BackboneFaultKind(FaultKind):
    """A backbone fault: ``apply`` calls the backbone's method of the kind's name."""

    #: "link", "risk group" or "pop"
    TARGET: ClassVar[str] = "link"

    def apply(self, net: Any, target: str, *args: Any, **params: Any) -> object:
        return getattr(net, self.NAME)(target, *args, **params)


class Loss(Section):
    loss: float = Field(gt=0, le=1, description="fraction of packets dropped")


#: the backbone's fault kinds by name (:class:`topologies.plugins.Registry`)
KINDS = plugins.Registry("backbone fault kind", BackboneFaultKind)


@KINDS.register
class CutLink(BackboneFaultKind):
    """Both ends of a link down: the fibre is cut."""

    NAME = "cut_link"


@KINDS.register
class RestoreLink(BackboneFaultKind):
    NAME = "restore_link"


@KINDS.register
class CutRiskGroup(BackboneFaultKind):
    """Every link of a shared-risk group down at once (one duct, one dig)."""

    NAME = "cut_risk_group"
    TARGET = "risk group"


@KINDS.register
class RestoreRiskGroup(BackboneFaultKind):
    NAME = "restore_risk_group"
    TARGET = "risk group"


@KINDS.register
class FailPop(BackboneFaultKind):
    """A PoP's router gone: every link of it down."""

    NAME = "fail_pop"
    TARGET = "pop"


@KINDS.register
class RestorePop(BackboneFaultKind):
    NAME = "restore_pop"
    TARGET = "pop"


@KINDS.register
class DegradeLink(BackboneFaultKind):
    """A link that drops a fraction of its packets and keeps its carrier (a gray
    failure: only BFD's lost hellos reveal it)."""

    NAME = "degrade_link"
    PARAMS = Loss


@KINDS.register
class RestoreDegradedLink(BackboneFaultKind):
    NAME = "restore_degraded_link"


def takes_loss(cls: type[BackboneFaultKind]) -> bool:
    """Whether the kind needs ``loss`` (a fraction, 0 < loss <= 1)."""
    return cls.PARAMS is not None and "loss" in cls.PARAMS.model_fields


def targets(bb: Backbone, target: str) -> set[str]:
    """The names a kind of ``target`` may act on in ``bb``."""
    if target == "link":
        return {lk.name for lk in bb.all_links}
    if target == "risk group":
        return {g.name for g in bb.risk_groups}
    return {p.name for p in bb.pops}


def actions(net: Any) -> dict:
    """Every kind bound to a live backbone, for the fault schedule
    (:class:`testbed.faults.schedule.Schedule`: ``actions[name](target[, loss])``)."""
    return {name: (lambda t, *args, c=cls, **p: c().apply(net, t, *args, **p))
            for name, cls in KINDS.items()}
