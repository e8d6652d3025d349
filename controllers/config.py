"""The controller's one configuration file: everything ``python -m controllers`` needs.

Bring-up (:func:`testbed.bringup.controller_config`) writes it as ``controller.json``:
the scenario's resolved ``controller`` section plus where things are (the topology
spec, the status and telemetry files), the seed, the link rate and who marks CE. The
scenario module validates the section; here it is only read, with the documented
defaults for missing keys, so the controller also starts from a bare
``{"spec": "spec.json"}``. ``python -m controllers --config FILE --port N`` loads it
(:func:`load`) before the apps start, and the apps read it with :func:`active`.

>>> cfg = ControllerConfig.from_dict({"mode": "adaptive", "telemetry_ms": 50, "seed": 3})
>>> cfg.mode, cfg.adaptive.interval_ms, cfg.ecn.mode, cfg.seed, cfg.failover
('adaptive', 50, 'off', 3, False)
>>> cfg.ecn.classes["collective"].min_bytes
20000
>>> ControllerConfig.from_dict({"recompute": True, "health": {"enabled": False}}).failover
True
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

MODES = ("ecmp", "adaptive", "gff", "spray")
ECN_MODES = ("off", "controller", "switch", "phantom", "auto")
#: traffic classes the ECN thresholds apply to
CLASSES = ("collective", "agents")


def ecn_backend(mode: str, *, red: bool) -> str:
    """Who marks CE for ``ecn.mode``: ``auto`` uses the kernel's RED where it exists;
    ``phantom`` is the per-packet phantom-queue marker in the switches' egress path
    (nftables, :mod:`testbed.phantom`): the controller marks nothing then.

    >>> ecn_backend("auto", red=True), ecn_backend("auto", red=False), ecn_backend("off", red=True)
    ('switch', 'controller', 'off')
    >>> ecn_backend("phantom", red=False)
    'phantom'
    """
    if mode == "auto":
        return "switch" if red else "controller"
    return mode


@dataclass(frozen=True)
class EcnClass:
    """RED-style thresholds of one traffic class, in KB of egress queue."""

    min_kb: float = 20
    max_kb: float = 60
    probability: float = 0.1

    @property
    def min_bytes(self) -> int:
        return int(self.min_kb * 1000)

    @property
    def max_bytes(self) -> int:
        return int(self.max_kb * 1000)


@dataclass(frozen=True)
class AdaptiveConfig:
    interval_ms: float = 100
    imbalance: float = 0.2
    elephant_mbps: float = 1.0
    #: place (and move) TCP connections too, learnt from their SYN; false: UDP only
    place_tcp: bool = True


@dataclass(frozen=True)
class EcnConfig:
    mode: str = "off"
    #: phantom queues drain at this fraction of the link rate (mode ``phantom``)
    drain: float = 0.95
    classes: dict[str, EcnClass] = field(
        default_factory=lambda: {name: EcnClass() for name in CLASSES})


@dataclass(frozen=True)
class HealthConfig:
    """The link-probe health monitor (:mod:`controllers.health`)."""

    enabled: bool = False
    loss_threshold: float = 0.05
    interval_ms: float = 250
    samples: int = 2
    probes: int = 10
    min_packets: int = 20


@dataclass(frozen=True)
class ControllerConfig:
    #: the topology spec (JSON) the controller plans from
    spec: str = "spec.json"
    #: JSON lines of controller events (None: none written)
    status: str | None = None
    #: JSON lines of port samples (None: none written)
    telemetry: str | None = None
    #: seeds the controller's random draws (ECN marking)
    seed: int = 1
    mode: str = "ecmp"
    telemetry_ms: float = 100
    #: port samples a second at most: the interval grows beyond telemetry_ms on fabrics
    #: with more ports than that (0: no limit)
    telemetry_budget: int = 2000
    #: 0 (off), "auto" (any free port) or a fixed port, on 127.0.0.1
    prometheus_port: int | str = 0
    link_mbps: float = 0.0
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    ecn: EcnConfig = field(default_factory=EcnConfig)
    #: who marks CE: "off", "switch" (RED in the kernel), "phantom" (nftables phantom
    #: queues on the switch ports) or "controller"; the runner
    #: resolves ``ecn.mode: auto`` from the host's capabilities and writes it here
    ecn_backend: str = "off"
    #: spines (any switch with one next hop) forward through fast-failover groups
    fast_failover: bool = False
    #: recompute and reinstall paths on port-status changes
    recompute: bool = False
    health: HealthConfig = field(default_factory=HealthConfig)
    #: extra os-ken apps run beside the base ones (``package.module[:AppClass]``)
    apps: tuple[str, ...] = ()
    #: folders the apps are also found in (the scenario file's: a student's own app)
    plugin_path: tuple[str, ...] = ()

    @property
    def controller_marks(self) -> bool:
        return self.ecn_backend == "controller"

    @property
    def failover(self) -> bool:
        """Whether any failure handling is on (the routing app that reacts to them)."""
        return self.fast_failover or self.recompute or self.health.enabled

    @classmethod
    def from_dict(cls, data: dict) -> ControllerConfig:
        telemetry_ms = data.get("telemetry_ms", 100)
        ad = data.get("adaptive") or {}
        ecn = data.get("ecn") or {}
        classes = {name: EcnClass(**(ecn.get("classes") or {}).get(name, {}))
                   for name in CLASSES}
        health = data.get("health") or {}
        return cls(
            spec=data.get("spec", "spec.json"),
            status=data.get("status"),
            telemetry=data.get("telemetry"),
            seed=int(data.get("seed", 1)),
            mode=data.get("mode", "ecmp"),
            telemetry_ms=telemetry_ms,
            telemetry_budget=int(data.get("telemetry_budget", 2000)),
            prometheus_port=_port(data.get("prometheus_port", 0)),
            link_mbps=float(data.get("link_mbps", 0.0)),
            adaptive=AdaptiveConfig(
                interval_ms=ad.get("interval_ms", telemetry_ms),
                imbalance=ad.get("imbalance", 0.2),
                elephant_mbps=ad.get("elephant_mbps", 1.0),
                place_tcp=bool(ad.get("place_tcp", True))),
            ecn=EcnConfig(mode=ecn.get("mode", "off"), drain=float(ecn.get("drain", 0.95)),
                          classes=classes),
            ecn_backend=data.get("ecn_backend") or ecn_backend(ecn.get("mode", "off"), red=False),
            fast_failover=bool(data.get("fast_failover", False)),
            recompute=bool(data.get("recompute", False)),
            health=HealthConfig(**{k: health[k] for k in HealthConfig.__dataclass_fields__
                                   if k in health}),
            apps=tuple(data.get("apps") or ()),
            plugin_path=tuple(data.get("plugin_path") or ()),
        )

    @classmethod
    def from_json(cls, path: str | Path | None) -> ControllerConfig:
        if not path:
            return cls()
        return cls.from_dict(json.loads(Path(path).read_text()))


_ACTIVE: ControllerConfig | None = None


def _port(value: object) -> int | str:
    """The Prometheus port as configured: ``"auto"`` or a number.

    >>> _port("auto"), _port("9100"), _port(0)
    ('auto', 9100, 0)
    """
    return "auto" if value == "auto" else int(value)  # type: ignore[arg-type]


def load(path: str | Path) -> ControllerConfig:
    """Read the configuration file and make it the one the apps see (:func:`active`)."""
    global _ACTIVE
    _ACTIVE = ControllerConfig.from_json(path)
    return _ACTIVE


def active() -> ControllerConfig:
    """The configuration this controller process was started with (:func:`load`)."""
    if _ACTIVE is None:
        raise RuntimeError("no controller configuration loaded (python -m controllers "
                           "--config FILE)")
    return _ACTIVE
