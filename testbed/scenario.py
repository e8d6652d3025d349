"""Scenario files: YAML that names the topology, controller, traffic mix and variants.

Each variant deep-merges its overrides onto the scenario's base sections. Validation is
pure (it touches nothing on the host) and stops at the first problem with a
:class:`ConfigError` whose ``field`` is the dotted path, e.g.
``variants[2].topology.oversubscription``.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from testbed.errors import ConfigError
from testbed.fabric_faults import parse_faults
from testbed.faults import Fault
from topologies.build import build_topology, builder_of, resolve
from topologies.params import ParamError
from topologies.spec import FabricSpec
from traffic.roce import OVERHEAD as ROCE_OVERHEAD

ETHERNET_HEADER = 14

NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,40}$")
SERVICES = ("retriever", "tool", "model", "agent")



# field -> (types, check, default); check returns an error text or None
def _pos(v) -> str | None:
    return None if v > 0 else "must be greater than 0"


def _nonneg(v) -> str | None:
    return None if v >= 0 else "must be 0 or more"


NUM = (int, float)


def _one_of(*allowed: str):
    def check(v) -> str | None:
        return None if v in allowed else f"must be one of {', '.join(map(repr, allowed))}"
    return check


def _range(lo: float, hi: float):
    return lambda v: None if lo <= v <= hi else f"must be {lo:g}..{hi:g}"


def _port(v) -> str | None:
    return None if v == 0 or 1024 <= v <= 65535 else "must be 0 (off) or 1024..65535"


def _kb_order(section: dict, where: str) -> None:
    if section["min_kb"] >= section["max_kb"]:
        raise ConfigError(f"{where}.min_kb", f"must be less than max_kb ({section['max_kb']}), "
                                             f"got {section['min_kb']}")


class Nested(dict):
    """A sub-section's schema (field -> (types, check, default)), validated recursively;
    ``after`` runs cross-field checks on the resolved sub-section."""

    def __init__(self, fields: dict, after=None) -> None:
        super().__init__(fields)
        self.after = after


def _ecn_class() -> Nested:
    return Nested({"min_kb": (NUM, _pos, 20), "max_kb": (NUM, _pos, 60),
                   "probability": (NUM, _range(0, 1), 0.1)}, after=_kb_order)


ECN_MODES = ("off", "controller", "switch", "phantom", "auto")

SCHEMA: dict[str, dict[str, tuple]] = {
    # the builder's own parameters model validates it (topologies.build)
    "topology": {},
    "controller": {
        "mode": (str, _one_of("ecmp", "adaptive", "spray"), "ecmp"),
        "telemetry_ms": (int, _range(10, 5000), 100),
        "prometheus_port": (int, _port, 0),
        "adaptive": (dict, Nested({
            "interval_ms": (NUM, _range(10, 60000), 100),
            "imbalance": (NUM, _range(0.01, 10), 0.2),
            "elephant_mbps": (NUM, _pos, 1.0),
            "place_tcp": (bool, None, True),
        }), None),
        "ecn": (dict, Nested({
            # YAML reads a bare `off` as false: accepted and written back as "off"
            "mode": ((str, bool), lambda v: None if v is False or v in ECN_MODES
                     else f"must be one of {', '.join(map(repr, ECN_MODES))}", "off"),
            # phantom queues drain at this fraction of the link rate (mode "phantom")
            "drain": (NUM, _range(0.5, 1.0), 0.95),
            "classes": (dict, Nested({"collective": (dict, _ecn_class(), None),
                                      "agents": (dict, _ecn_class(), None)}), None),
        }), None),
        # resilience (issue 6): local repair, recompute on port status, health drains
        "fast_failover": (bool, None, False),
        "recompute": (bool, None, False),
        "health": (dict, None, {}),
    },
    "agents": {
        "enabled": (bool, None, True),
        "driver": (int, _nonneg, 0),
        "services": (dict, None, {}),
        "concurrency": (int, lambda v: None if 1 <= v <= 256 else "must be 1..256", 8),
        "timeout_ms": (NUM, _pos, 2000),
        "service_us": (int, _nonneg, 0),
        "ecn": (bool, None, False),  # net.ipv4.tcp_ecn=1 in every host namespace
        "multipath": (bool, None, False),
        "attempt_ms": (NUM, _pos, 500),
    },
    "training": {
        "enabled": (bool, None, False),
        "ranks": (list, None, []),
        "bytes": (int, lambda v: None if 1000 <= v <= 10**9 else "must be 1000..1e9", 2_000_000),
        "compute_ms": (NUM, _nonneg, 50),
        "rate_mbps": (NUM, _pos, 80),
        "payload": (int, lambda v: None if 64 <= v <= 8192 else "must be 64..8192", 4096),
        "step_timeout_ms": (NUM, _pos, 500),
        "pattern": (str, _one_of("ring", "stride", "random"), "ring"),
        "stride": (int, _nonneg, 0),  # 0: half the ranks
        "ecn": (bool, None, False),
        "cnp_interval_us": (NUM, _nonneg, 50),
        "spray": (bool, None, False),
        "dcqcn": (dict, Nested({
            "enabled": (bool, None, False),
            "g": (NUM, lambda v: None if 0 < v <= 1 else "must be in (0, 1]", 1 / 16),
            "rai_mbps": (NUM, _pos, 0.5),
            "rhai_mbps": (NUM, _pos, 2.0),
            "timer_us": (NUM, _range(10, 10**6), 2000),
            "alpha_timer_us": (NUM, _range(10, 10**6), 2000),
            "byte_counter_kb": (NUM, _pos, 64),
            "f": (int, _range(0, 100), 5),
            "min_rate_mbps": (NUM, _pos, 0.5),
        }), None),
        "multipath": (bool, None, False),
    },
}
#: scenarios built around one experiment section instead of fabric variants:
#: section name -> module with validate(section) / check_timing(cfg, duration) / run(...)
EXPERIMENTS = {"macsec": "testbed.macsec.experiment",
               "backbone": "testbed.backbone.experiment"}
TOP_LEVEL = {"name", "description", "seed", "seeds", "duration_s", "topology", "controller",
             "agents", "training", "variants", "faults", *EXPERIMENTS}
MAX_SEEDS = 10


@dataclass(frozen=True)
class Variant:
    """One side of a comparison: fully resolved sections plus the topology it builds."""

    name: str
    topology: dict[str, Any]
    controller: dict[str, Any]
    agents: dict[str, Any]
    training: dict[str, Any]
    reference: bool = False  # the non-blocking reference the report compares against
    faults: tuple[Fault, ...] = ()

    def fabric(self, prefix: str) -> FabricSpec:
        return build_topology(self.topology, prefix)


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: fabric ``variants``, or one experiment section (``kind``)."""

    name: str
    description: str
    seed: int
    duration_s: float
    variants: tuple[Variant, ...]
    source: dict[str, Any]
    kind: str = "fabric"  # or a key of EXPERIMENTS; its section is source[kind]
    seeds: tuple[int, ...] = ()  # every variant runs once per seed; () means (seed,)

    @property
    def run_seeds(self) -> tuple[int, ...]:
        return self.seeds or (self.seed,)

    def experiment(self):
        """The module that runs this scenario's experiment section."""
        return importlib.import_module(EXPERIMENTS[self.kind])


def _merge(base: dict, override: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


TYPE_WORDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string",
              dict: "a mapping", list: "a list"}


def _type_name(types) -> str:
    if types == NUM:
        return "a number"
    return " or ".join(TYPE_WORDS[t] for t in types) if isinstance(types, tuple) \
        else TYPE_WORDS[types]


def _check_section(section: str, data: Any, where: str) -> dict[str, Any]:
    if section == "topology":  # validated by its builder's parameters (topologies.build)
        try:
            return resolve(data)
        except ParamError as exc:
            raise ConfigError(f"{where}.{exc.field}", exc.reason) from exc
    return _check_fields(SCHEMA[section], data, where)


def _merge_topology(base: dict, override: dict) -> dict:
    """A variant's topology: merged onto the base's, unless it names another builder
    (then the base's parameters, made for that other builder, do not apply)."""
    names_one = "builder" in override or isinstance(override.get("nodes"), dict)
    if names_one and builder_of(override) != builder_of(base):
        return copy.deepcopy(override)
    return _merge(base, override)


def _check_fields(schema: dict, data: Any, where: str) -> dict[str, Any]:
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(where, "must be a mapping")
    for key in data:
        if key not in schema:
            raise ConfigError(f"{where}.{key}", f"unknown field (known: {', '.join(schema)})")
    out = {}
    for key, (types, check, default) in schema.items():
        if isinstance(check, Nested):
            out[key] = _check_fields(check, data.get(key), f"{where}.{key}")
            continue
        value = data.get(key, copy.deepcopy(default))
        is_bool = isinstance(value, bool)
        allowed = types if isinstance(types, tuple) else (types,)
        if (is_bool and bool not in allowed) or not isinstance(value, types):
            raise ConfigError(f"{where}.{key}", f"must be {_type_name(types)}, got {value!r}")
        if check and (problem := check(value)):
            raise ConfigError(f"{where}.{key}", f"{problem}, got {value!r}")
        out[key] = "off" if value is False and types == (str, bool) else value
    if isinstance(schema, Nested) and schema.after:
        schema.after(out, where)
    return out


def _check_nodes(where: str, value: Any, nodes: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < nodes:
        raise ConfigError(where, f"must be a node index 0..{nodes - 1}, got {value!r}")
    return value


HEALTH = {"enabled": (bool, None, False),
          "loss_threshold": (NUM, lambda v: None if 0 < v < 1 else "must be between 0 and 1",
                             0.05),
          "interval_ms": (NUM, lambda v: None if 50 <= v <= 60000 else "must be 50..60000",
                          250),
          "samples": (int, lambda v: None if 1 <= v <= 100 else "must be 1..100", 2),
          "probes": (int, lambda v: None if 1 <= v <= 100 else "must be 1..100", 10),
          "min_packets": (int, _pos, 20)}


def _check_health(data: dict, where: str) -> dict:
    """``controller.health``: the health monitor's switch and thresholds, defaults filled."""
    for key in data:
        if key not in HEALTH:
            raise ConfigError(f"{where}.{key}", f"unknown field (known: {', '.join(HEALTH)})")
    out = {}
    for key, (types, check, default) in HEALTH.items():
        value = data.get(key, default)
        if isinstance(value, bool) != (types is bool) or not isinstance(value, types):
            raise ConfigError(f"{where}.{key}", f"must be {_type_name(types)}, got {value!r}")
        if check and (problem := check(value)):
            raise ConfigError(f"{where}.{key}", f"{problem}, got {value!r}")
        out[key] = value
    return out


def _check_variant(name: str, sections: dict, where: str, faults: Any = None) -> Variant:
    resolved = {s: _check_section(s, sections.get(s), f"{where}.{s}" if where else s)
                for s in SCHEMA}
    prefix = f"{where}." if where else ""
    try:
        spec = build_topology(resolved["topology"], "tb0000")
    except ParamError as exc:
        raise ConfigError(f"{prefix}topology.{exc.field}", exc.reason) from exc
    nodes = spec.nodes
    resolved["controller"]["health"] = _check_health(resolved["controller"]["health"],
                                                     f"{prefix}controller.health")
    fault_list = parse_faults(faults, spec, f"{prefix}faults")
    agents = resolved["agents"]
    if agents["enabled"] or agents["services"]:
        _check_nodes(f"{prefix}agents.driver", agents["driver"], nodes)
        services = agents["services"]
        for svc in SERVICES:
            if svc not in services:
                raise ConfigError(f"{prefix}agents.services.{svc}", "missing: give its node index")
        for svc, node in services.items():
            if svc not in SERVICES:
                raise ConfigError(f"{prefix}agents.services.{svc}",
                                  f"unknown service (known: {', '.join(SERVICES)})")
            _check_nodes(f"{prefix}agents.services.{svc}", node, nodes)
    training = resolved["training"]
    if training["enabled"] or training["ranks"]:
        ranks = training["ranks"]
        if len(ranks) < 2:
            raise ConfigError(f"{prefix}training.ranks", "needs at least 2 node indices")
        for i, node in enumerate(ranks):
            _check_nodes(f"{prefix}training.ranks[{i}]", node, nodes)
        if len(set(ranks)) != len(ranks):
            raise ConfigError(f"{prefix}training.ranks", f"node indices repeat: {ranks}")
        if training["stride"] and training["stride"] % len(ranks) == 0:
            raise ConfigError(f"{prefix}training.stride",
                              f"{training['stride']} sends every rank to itself with "
                              f"{len(ranks)} ranks")
        if training["dcqcn"]["min_rate_mbps"] > training["rate_mbps"]:
            raise ConfigError(f"{prefix}training.dcqcn.min_rate_mbps",
                              f"must not exceed rate_mbps ({training['rate_mbps']:g})")
        frame = training["payload"] + ROCE_OVERHEAD - ETHERNET_HEADER
        if frame > spec.mtu:
            raise ConfigError(f"{prefix}training.payload",
                              f"{training['payload']} bytes make {frame}-byte IP packets, "
                              f"over the MTU of {spec.mtu}")
    return Variant(name=name, **resolved, faults=fault_list)


def parse(data: Any, duration_override: float | None = None) -> Scenario:
    """Validate a scenario already loaded from YAML; raises :class:`ConfigError`."""
    if not isinstance(data, dict):
        raise ConfigError("scenario", "must be a YAML mapping")
    for key in data:
        if key not in TOP_LEVEL:
            raise ConfigError(key, f"unknown field (known: {', '.join(sorted(TOP_LEVEL))})")
    name = data.get("name")
    if not isinstance(name, str) or not NAME.match(name):
        raise ConfigError("name", f"must be lowercase letters, digits, '-' or '_', got {name!r}")
    seed = data.get("seed", 1)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ConfigError("seed", f"must be an integer, got {seed!r}")
    duration = data.get("duration_s", 30) if duration_override is None else duration_override
    if isinstance(duration, bool) or not isinstance(duration, NUM) or not 1 <= duration <= 3600:
        where = "DURATION" if duration_override is not None else "duration_s"
        raise ConfigError(where, f"must be 1..3600 seconds, got {duration!r}")
    kinds = [k for k in EXPERIMENTS if k in data]
    if len(kinds) > 1:
        raise ConfigError(kinds[1], f"a scenario runs one experiment, and {kinds[0]!r} is set")
    if kinds:
        return _parse_experiment(kinds[0], data, name, seed, float(duration))
    base = {s: data.get(s) or {} for s in SCHEMA}
    for s, v in base.items():
        if not isinstance(v, dict):
            raise ConfigError(s, "must be a mapping")
    _check_variant(name, base, "", data.get("faults"))  # name base errors by their own path
    raw_variants = data.get("variants") or [{"name": name}]
    if not isinstance(raw_variants, list):
        raise ConfigError("variants", "must be a list")
    variants, seen = [], set()
    for i, raw in enumerate(raw_variants):
        where = f"variants[{i}]"
        if not isinstance(raw, dict):
            raise ConfigError(where, "must be a mapping")
        vname = raw.get("name")
        if not isinstance(vname, str) or not NAME.match(vname):
            raise ConfigError(f"{where}.name", f"must be a short lowercase name, got {vname!r}")
        if vname in seen:
            raise ConfigError(f"{where}.name", f"repeats {vname!r}")
        seen.add(vname)
        for key in raw:
            if key not in ("name", "reference", "faults") and key not in SCHEMA:
                raise ConfigError(f"{where}.{key}", "unknown field")
        reference = raw.get("reference", False)
        if not isinstance(reference, bool):
            raise ConfigError(f"{where}.reference", f"must be true or false, got {reference!r}")
        merged = {s: (_merge_topology if s == "topology" else _merge)(base[s], raw.get(s) or {})
                  for s in SCHEMA}
        for s in SCHEMA:
            if raw.get(s) is not None and not isinstance(raw.get(s), dict):
                raise ConfigError(f"{where}.{s}", "must be a mapping")
        faults = raw["faults"] if "faults" in raw else data.get("faults")
        variants.append(dataclasses.replace(_check_variant(vname, merged, where, faults),
                                            reference=reference))
    if variants[0].reference:
        raise ConfigError("variants[0].reference", "the first variant is the baseline; "
                                                    "put the reference after it")
    return Scenario(
        name=name, description=str(data.get("description", "")).strip(), seed=seed,
        duration_s=float(duration), variants=tuple(variants), source=data,
        seeds=_check_seeds(data.get("seeds"), seed),
    )


def _check_seeds(value: Any, seed: int) -> tuple[int, ...]:
    """``seeds``: distinct integers, 1..MAX_SEEDS of them; absent means ``[seed]``."""
    if value is None:
        return (seed,)
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_SEEDS:
        raise ConfigError("seeds", f"must be a list of 1..{MAX_SEEDS} integers, got {value!r}")
    for i, s in enumerate(value):
        if isinstance(s, bool) or not isinstance(s, int):
            raise ConfigError(f"seeds[{i}]", f"must be an integer, got {s!r}")
    if len(set(value)) != len(value):
        raise ConfigError("seeds", f"repeat: {value}")
    return tuple(value)


def _parse_experiment(kind: str, data: dict, name: str, seed: int,
                      duration: float) -> Scenario:
    """A scenario built around one experiment section (no fabric sections)."""
    for key in ("topology", "controller", "agents", "training", "variants", "seeds",
                "faults"):
        if key in data:
            raise ConfigError(key, f"not used by a {kind} scenario (it is set in '{kind}')")
    module = importlib.import_module(EXPERIMENTS[kind])
    module.check_timing(module.validate(data[kind]), duration)
    return Scenario(name=name, description=str(data.get("description", "")).strip(), seed=seed,
                    duration_s=duration, variants=(), source=data, kind=kind)


def load(path: Path | str, duration_override: float | None = None) -> Scenario:
    """Read and validate a scenario file."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ConfigError(str(path), exc.strerror or "cannot be read") from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path.name}:{mark.line + 1}" if mark else path.name
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(where, f"YAML syntax: {problem}") from exc
    return parse(data, duration_override)
