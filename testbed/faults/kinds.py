"""Fault kinds of a fabric: a registry, one small class a kind.

A kind says what it takes as a target (a link, a switch, a plane, a rail, or nothing:
the controller), which parameters it takes (a pydantic model), which kernel feature it
needs (a :class:`~testbed.host.capabilities.Capabilities` field, e.g. ``netem``), and what it
does to a live fabric (:meth:`FaultKind.apply`, given the run's
:class:`~testbed.faults.fabric.FabricFaults`). A scenario names a kind by its name
(``action: delay``), or a kind of its own by dotted path
(``action: package.module:ClassName``, parameters under ``params:``), so a new kind is
one class:

>>> class Blackhole(FaultKind):
...     '''Drop every frame leaving the link (a silent failure: carrier stays up).'''
...     NAME = "blackhole"
...     def apply(self, faults, target, **params):
...         return faults.degrade(target, 1.0)
>>> _ = register(Blackhole)
>>> kind("blackhole").TARGET, "blackhole" in KINDS
('link', True)
>>> _ = KINDS.forget("blackhole")
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, Field

from testbed.errors import ConfigError, parse_section
from testbed.faults.schedule import Fault
from topologies import plugins
from topologies.params import ParamError, Section, parse


class FaultKind:
    """One kind of fault; subclasses set the class constants and :meth:`apply`."""

    NAME: ClassVar[str] = ""
    #: "link", "switch", "plane", "rail", or None (the run's controller)
    TARGET: ClassVar[str | None] = "link"
    #: the parameters it takes (None: none)
    PARAMS: ClassVar[type[BaseModel] | None] = None
    #: a Capabilities field that must be true on the host (e.g. "netem")
    NEEDS: ClassVar[str | None] = None

    def check(self, spec: Any, params: dict, where: str) -> None:
        """Refuse (:class:`ConfigError`) parameters this fabric cannot take; the
        parameters' own model checked their shape already."""

    def expand(self, at_s: float, target: str, params: dict) -> list[Fault]:
        """The scheduled actions of one fault entry (one, unless a kind repeats)."""
        return [Fault(at_s, self.NAME, target, params=params)]

    def outlasts(self, at_s: float, params: dict, last: Fault, duration_s: float,
                 where: str) -> ConfigError:
        """The error for an entry whose actions (:meth:`expand`) go on past the run's
        ``duration_s``: ``last`` is its last action."""
        return ConfigError(f"{where}.at_s", f"{self.NAME}'s last action ({last.action} at "
                                            f"{last.at_s:g} s) is not within the run's "
                                            f"{duration_s:g} s")

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        """Do it to the live fabric; ``args`` are the parameters given by position
        (``degrade(target, 0.3)``), in the order of :attr:`PARAMS`' fields."""
        raise NotImplementedError

    def given(self, args: tuple, params: dict) -> dict:
        """Positional parameters by their names, merged with the named ones."""
        names = list(self.PARAMS.model_fields) if self.PARAMS else []
        return {**dict(zip(names, args, strict=False)), **params}


#: the fault kinds by name (:class:`topologies.plugins.Registry`, the shape every
#: extension axis has)
KINDS = plugins.Registry("fault kind", FaultKind)
register = KINDS.register
DOTTED = plugins.DOTTED


def kind(name: str, where: str = "action") -> type[FaultKind]:
    """The kind named ``name`` (registered, or ``package.module:Class``)."""
    try:
        return KINDS.resolve(name, where)
    except ParamError as exc:
        raise ConfigError(exc.field, exc.reason) from None


def parameters(cls: type[FaultKind], entry: dict, where: str) -> dict:
    """A fault entry's parameters for its kind: the built-in keys of the entry (e.g.
    ``loss``) or, for a plug-in kind, its ``params:`` mapping; checked by its model."""
    known = {"at_s", "action", "target", "params"} | {
        f for k in KINDS.values() if k.PARAMS for f in k.PARAMS.model_fields}
    for key in entry:
        if key not in known:
            raise ConfigError(f"{where}.{key}",
                              f"unknown field (known: {', '.join(sorted(known))})")
    given = dict(entry.get("params") or {})
    given.update({k: v for k, v in entry.items()
                  if k not in ("at_s", "action", "target", "params")})
    if cls.PARAMS is None:
        if given:
            key = next(iter(given))
            raise ConfigError(f"{where}.{key}", f"not used by {cls.NAME}")
        return {}
    try:
        model = parse(cls.PARAMS, given, where)
    except ParamError as exc:
        field = exc.field
        if "unknown field" in exc.reason:
            raise ConfigError(field, f"not used by {cls.NAME}") from None
        raise ConfigError(field, exc.reason) from None
    return model.model_dump()


# -- the built-in kinds ----------------------------------------------------------------
class _Links(FaultKind):
    UP: ClassVar[bool] = False

    def links(self, faults: Any, target: str) -> list:
        return [faults.link(target)]

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.set_links(self.links(faults, target), up=self.UP)


@register
class LinkDown(_Links):
    """Both ends of a link down: both lose carrier."""

    NAME = "link_down"


@register
class LinkUp(_Links):
    NAME = "link_up"
    UP = True


class FlapParams(Section):
    period_s: float = Field(1.0, ge=0.05, le=60)
    count: int = Field(3, ge=1, le=100)


@register
class LinkFlap(FaultKind):
    """``count`` down/up cycles of ``period_s``; one record per transition."""

    NAME = "link_flap"
    PARAMS = FlapParams

    def check(self, spec: Any, params: dict, where: str) -> None:
        """Refuse (:class:`ConfigError`) parameters this fabric cannot take; the
        parameters' own model checked their shape already."""

    def expand(self, at_s: float, target: str, params: dict) -> list[Fault]:
        """Cycle n (from 0): down at ``at_s + n * period_s``, up half a period later; the
        last link_up at ``at_s + (count - 1/2) * period_s``.

        >>> [(f.at_s, f.action) for f in LinkFlap().expand(8.0, "l", {"period_s": 2,
        ...                                                           "count": 2})]
        [(8.0, 'link_down'), (9.0, 'link_up'), (10.0, 'link_down'), (11.0, 'link_up')]
        """
        out = []
        for n in range(params["count"]):
            t = round(at_s + n * params["period_s"], 6)
            out.append(Fault(t, "link_down", target))
            out.append(Fault(round(t + params["period_s"] / 2, 6), "link_up", target))
        return out

    def outlasts(self, at_s: float, params: dict, last: Fault, duration_s: float,
                 where: str) -> ConfigError:
        """Names ``count`` with the cycles that fit, or ``period_s`` when none does (the
        link would stay down past the run's end, its restore never applied)."""
        period, count = params["period_s"], params["count"]
        fit = next((n for n in range(count, 0, -1)
                    if self.expand(at_s, "", {**params, "count": n})[-1].at_s < duration_s), 0)
        if fit:
            return ConfigError(f"{where}.count", f"{count} cycles of {period:g} s from "
                                                 f"{at_s:g} s end with a link_up at "
                                                 f"{last.at_s:g} s, past the run's "
                                                 f"{duration_s:g} s (at most {fit} fit)")
        return ConfigError(f"{where}.period_s", f"its first link_up, at {at_s:g} + "
                                                f"{period:g}/2 s, is past the run's "
                                                f"{duration_s:g} s")


@register
class SwitchFail(_Links):
    """Every link of a switch down (its neighbours see carrier gone on every port)."""

    NAME = "switch_fail"
    TARGET = "switch"

    def links(self, faults: Any, target: str) -> list:
        return faults.switch_links(target)


@register
class SwitchRestore(SwitchFail):
    NAME = "switch_restore"
    UP = True


@register
class PlaneFail(_Links):
    """Every switch of a plane."""

    NAME = "plane_fail"
    TARGET = "plane"

    def links(self, faults: Any, target: str) -> list:
        return faults.plane_links(target)


@register
class PlaneRestore(PlaneFail):
    NAME = "plane_restore"
    UP = True


@register
class RailFail(_Links):
    """One NIC of a node (``n2p0r0``)."""

    NAME = "rail_fail"
    TARGET = "rail"


@register
class RailRestore(RailFail):
    NAME = "rail_restore"
    UP = True


@register
class SwapRails(FaultKind):
    """A node's NIC (``n1p0r0``) and its NIC on the next rail swap cables: each reaches
    the other rail's leaf (the re-cabling mistake acceptance must find; again: mended)."""

    NAME = "swap_rails"
    TARGET = "rail"

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.swap_rails(target)


@register
class ControllerKill(FaultKind):
    """SIGKILL to the controller's process group: a crash, not a shutdown."""

    NAME = "controller_kill"
    TARGET = None

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.kill_controller()


@register
class ControllerRestart(ControllerKill):
    """The same controller again (same argv and port); the switches reconnect."""

    NAME = "controller_restart"

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.restart_controller()


@register
class PfcStorm(FaultKind):
    """A host NIC (``n2p0r0``) that stops draining: it sends PAUSE for every lossless
    priority without end (needs ``qos.pfc.enabled``; :mod:`testbed.fabric.pfc` sends them)."""

    NAME = "pfc_storm"
    TARGET = "rail"

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.pfc_storm(target, on=True)


@register
class PfcStormStop(PfcStorm):
    """The NIC drains again (``pfc_storm`` undone)."""

    NAME = "pfc_storm_stop"

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.pfc_storm(target, on=False)


class LossParams(Section):
    loss: float = Field(ge=0.001, le=1.0, description="fraction of frames dropped")


@register
class Degrade(FaultKind):
    """nftables drops ``loss`` of the frames leaving every end of the link."""

    NAME = "degrade"
    PARAMS = LossParams

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.degrade(target, self.given(args, params)["loss"])


@register
class Restore(FaultKind):
    """Undo ``degrade``."""

    NAME = "restore"

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.restore(target)


class DelayParams(Section):
    delay_ms: float = Field(ge=0, le=10000, description="one-way delay added")
    jitter_ms: float = Field(0, ge=0, le=10000, description="netem jitter (uniform)")


@register
class Delay(FaultKind):
    """netem delay (and jitter) in every end's egress queue of the link, in place of its
    FIFO (the link's rate and buffer stay); needs netem in the kernel."""

    NAME = "delay"
    PARAMS = DelayParams
    NEEDS = "netem"

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        p = self.given(args, params)
        return faults.delay(target, p["delay_ms"], p.get("jitter_ms", 0.0))


@register
class DelayRestore(FaultKind):
    """The link's own queue again (its FIFO, or its configured propagation delay)."""

    NAME = "delay_restore"
    NEEDS = "netem"

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.undelay(target)


class RateParams(Section):
    rate_mbps: float = Field(gt=0, le=100000, description="the link's new rate")


@register
class Rate(FaultKind):
    """The link's rate changed in place (the HTB class of every end): a degraded optic,
    a lane that trained down."""

    NAME = "rate"
    PARAMS = RateParams
    NEEDS = "htb"

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.set_rate(target, self.given(args, params)["rate_mbps"])


@register
class RateRestore(FaultKind):
    """The link's configured rate again."""

    NAME = "rate_restore"
    NEEDS = "htb"

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.set_rate(target, None)


class ThrottleParams(Section):
    rate_mbps: float = Field(gt=0, le=100000, description="the NIC's rate once its burst "
                                                          "is spent")
    burst_kb: float = Field(2000, gt=0, le=1000000, description="KB it still sends at full "
                                                                "rate after an idle spell")


@register
class Throttle(FaultKind):
    """One NIC of a node (``n3p0r0``) sends its first ``burst_kb`` after an idle spell
    at full rate, then at ``rate_mbps``: a NIC that throttles under sustained load
    (heat, a power cap), which a short link test passes and a collective does not."""

    NAME = "throttle"
    TARGET = "rail"
    PARAMS = ThrottleParams
    NEEDS = "htb"

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        p = self.given(args, params)
        burst = p.get("burst_kb", ThrottleParams.model_fields["burst_kb"].default)
        return faults.throttle(target, p["rate_mbps"], burst)


@register
class ThrottleRestore(RateRestore):
    """The NIC's configured rate again."""

    NAME = "throttle_restore"
    TARGET = "rail"


class RackParams(Section):
    leaves: int = Field(1, ge=1, le=64, description="add_rack: leaves added on every plane")
    nodes: int = Field(ge=1, le=250, description="add_rack: nodes added behind them (as "
                                                 "many per leaf as the fabric's leaves have)")
    plant: list[dict] = Field(default_factory=list, description="add_rack: faults made in "
                              "the rack before its acceptance (acceptance.plant's entries: "
                              "action, target in the rack or random, rate_fraction, loss)")


@register
class AddRack(FaultKind):
    """A rack cabled into the running fabric (``leaves`` more leaves on every plane and
    the ``nodes`` behind them), accepted on its own, then routed by the controller; the
    workloads go on (:mod:`testbed.operations.expand`; ``expansion.json``)."""

    NAME = "add_rack"
    TARGET = None
    PARAMS = RackParams

    def check(self, spec: Any, params: dict, where: str) -> None:
        from testbed.acceptance.schema import Plant
        from testbed.operations.expand import planted_in

        for i, entry in enumerate(params["plant"]):
            parse_section(Plant, entry, f"{where}.plant[{i}]")
        try:
            planted_in(spec, params["leaves"], params["nodes"], params["plant"], 1,
                       f"{where}.plant")
        except ConfigError as exc:
            field = {"--leaves": f"{where}.leaves", "--nodes": f"{where}.nodes",
                     "LAB": f"{where}.action"}.get(exc.field, exc.field)
            raise ConfigError(field, exc.reason) from None

    def apply(self, faults: Any, target: str, *args: Any, **params: Any) -> object:
        return faults.add_rack(**self.given(args, params))
