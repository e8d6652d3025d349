"""The controller's one configuration file: everything ``python -m controllers`` needs.

Bring-up (:func:`testbed.fabric.bringup.controller_config`) writes it as ``controller.json``:
the scenario's validated ``controller`` section plus where things are (the topology
spec, the status and telemetry files), the seed and who marks CE (the link rate is the
spec's). Both sides use one model: :class:`ControllerConfig` is the scenario's
:class:`controllers.schema.Controller` with those keys added, so a default or a range is
written once; bring-up validates the file before the controller starts, and the
controller reads it back with the same model (a bare ``{"spec": "spec.json"}`` gives
the documented defaults). ``python -m controllers --config FILE --port N`` loads it
(:func:`load`) before the apps start, and the apps read it with :func:`active`.

>>> cfg = ControllerConfig.from_dict({"mode": "adaptive", "telemetry_ms": 50, "seed": 3})
>>> cfg.mode, cfg.adaptive.interval_ms, cfg.ecn.mode, cfg.seed, cfg.failover
('adaptive', 100, 'off', 3, False)
>>> cfg.ecn.classes.collective.min_bytes
20000
>>> ControllerConfig.from_dict({"recompute": True, "health": {"enabled": False}}).failover
True
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field, model_validator

from controllers.schema import CLASSES, ECN_MODES, Controller, EcnClass  # noqa: F401


def ecn_backend(mode: str, *, red: bool) -> str:
    """Who marks CE for ``ecn.mode``: ``auto`` uses the kernel's RED where it exists;
    ``phantom`` is the per-packet phantom-queue marker in the switches' egress path
    (nftables, :mod:`testbed.fabric.phantom`): the controller marks nothing then.

    >>> ecn_backend("auto", red=True), ecn_backend("auto", red=False), ecn_backend("off", red=True)
    ('switch', 'controller', 'off')
    >>> ecn_backend("phantom", red=False)
    'phantom'
    """
    if mode == "auto":
        return "switch" if red else "controller"
    return mode


class ControllerConfig(Controller):
    """``controller.json``: the validated controller section and where things are."""

    spec: str = Field("spec.json", description="the topology spec (JSON) the controller "
                                               "plans from")
    status: str | None = Field(None, description="JSON lines of controller events")
    telemetry: str | None = Field(None, description="JSON lines of port samples")
    seed: int = Field(1, ge=0, description="seeds the controller's random draws (ECN)")
    ecn_backend: Literal["off", "controller", "switch", "phantom"] = Field(
        "off", description="who marks CE, ecn.mode resolved from the host's RED")
    plugin_path: list[str] = Field(default_factory=list, description="folders the apps are "
                                   "also found in (the scenario file's)")

    @model_validator(mode="before")
    @classmethod
    def _backend(cls, data: Any) -> Any:
        """Without ``ecn_backend``, the one ``ecn.mode`` gives on a kernel without RED."""
        if isinstance(data, dict) and data.get("ecn_backend") is None:
            mode = (data.get("ecn") or {}).get("mode", "off")
            data = {**data, "ecn_backend": ecn_backend("off" if mode is False else mode,
                                                       red=False)}
        return data

    @property
    def controller_marks(self) -> bool:
        return self.ecn_backend == "controller"

    @property
    def failover(self) -> bool:
        """Whether any failure handling is on (the routing app that reacts to them)."""
        return self.fast_failover or self.recompute or self.health.enabled

    @classmethod
    def from_dict(cls, data: dict) -> ControllerConfig:
        return cls.model_validate(data)

    @classmethod
    def from_json(cls, path: str | Path | None) -> ControllerConfig:
        if not path:
            return cls()
        return cls.model_validate_json(Path(path).read_text())


_ACTIVE: ControllerConfig | None = None


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
