"""The macsec section of a scenario: its shape and the checks no shape can say (pure)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from testbed.errors import ConfigError
from testbed.experiments import base
from testbed.macsec.cipher import CipherSuite
from topologies.params import Section


# validation ----------------------------------------------------------------
class Attack(Section):
    """What the attacker injects toward b, and when (default: halfway)."""

    tampered: int = Field(10, ge=0, le=100000, description="captured frames re-sent with "
                                                           "one octet flipped")
    replayed: int = Field(10, ge=0, le=100000, description="captured frames re-sent as they "
                                                           "were")
    untagged: int = Field(10, ge=0, le=100000, description="plain UDP frames without a "
                                                           "SecTAG")
    at_s: float | None = Field(None, gt=0, description="seconds into the protected variant "
                                                       "(default: halfway)")


class MacsecSection(Section):
    """The ``macsec:`` section of a scenario."""

    backend: Literal["auto", "userspace", "kernel"] = Field(
        "auto", description="kernel macsec devices, the lab's userspace SecY, or auto (the "
                            "kernel's where it has MACsec)")
    suite: Literal[tuple(s.value for s in CipherSuite)] = Field(  # type: ignore[valid-type]
        "gcm-aes-128", description="the cipher suite (the XPN suites: 64-bit packet numbers)")
    encrypt: bool = Field(True, description="encrypt (confidentiality); false: integrity only")
    validate_: Literal["strict", "check", "disabled"] = Field(
        "strict", alias="validate", description="validateFrames: strict drops what fails, "
                                                "check counts it and delivers, disabled "
                                                "checks nothing")
    replay_window: int = Field(0, ge=0, le=(1 << 32) - 1, description="packet numbers a "
                                                                       "frame may arrive late")
    mtu: int = Field(1500, ge=1280, le=9000, description="MTU of the protected interface")
    link_mbps: float = Field(20, ge=0.1, le=100000, description="the link's rate, Mb/s")
    bulk_seconds: float = Field(8, ge=0.5, le=3600, description="seconds of the bulk TCP "
                                                                "flow")
    chain_concurrency: int = Field(4, ge=1, le=256, description="agent chains in flight "
                                                                "over the link")
    chain_timeout_ms: float = Field(2000, gt=0, description="ms after which a chain counts "
                                                            "as failed")
    rotate_at_s: float | None = Field(None, gt=0, description="seconds into the protected "
                                                              "variant at which the keys "
                                                              "rotate (default: none)")
    attack: Attack = Field(Attack(), description="the attacker on the wire")


def validate(section: Any, where: str = "macsec") -> dict:
    """Check a scenario's ``macsec:`` section; return it with defaults filled.

    Raises :class:`ConfigError` whose field is e.g. ``macsec.replay_window``.
    Pure: touches nothing on the host.
    """
    if section is not None and not isinstance(section, dict):
        raise ConfigError(where, f"must be a mapping, got {type(section).__name__}")
    parsed = base.Experiment.section(MacsecSection, section, where)
    result = parsed.model_dump(by_alias=True)
    if CipherSuite.parse(result["suite"]).xpn and result["replay_window"] > 1 << 30:
        raise ConfigError(f"{where}.replay_window",
                          f"must be <= 2**30 for XPN suites, got {result['replay_window']}")
    return result


def check_timing(cfg: dict, duration_s: float, where: str = "macsec") -> None:
    """``attack.at_s`` and ``rotate_at_s`` must fall inside the traffic (pure)."""
    for field, value in ((f"{where}.rotate_at_s", cfg["rotate_at_s"]),
                         (f"{where}.attack.at_s", cfg["attack"]["at_s"])):
        if value is not None and value >= duration_s:
            raise ConfigError(field, f"must be less than duration_s ({duration_s:g}), "
                                     f"got {value:g}")
