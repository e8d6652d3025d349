"""Scenario files: a head (name, description, seeds, duration) and one experiment kind.

The head is the same for every kind; the rest of the file is the sections of the kind
the scenario selects (``kind:``, or the kind whose section it has: ``macsec:``,
``backbone:``; otherwise the fabric with its ``topology``, ``controller``, ``agents``,
``training``, ``faults`` and ``variants``). Every section is validated by its pydantic
model (:mod:`topologies.params`); validation is pure (it touches nothing on the host)
and stops at the first problem with a :class:`ConfigError` whose ``field`` is the dotted
path, e.g. ``variants[2].topology.oversubscription``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from testbed import experiments
from testbed.errors import ConfigError
from testbed.experiments.base import Experiment
from testbed.experiments.fabric_schema import Name
from topologies.params import ParamError, Section
from topologies.params import parse as parse_section

MAX_SEEDS = 10


class Head(Section):
    """The keys every scenario has, whatever its kind."""

    name: Name = Field(description="lowercase letters, digits, '-' or '_'")
    description: str = ""
    kind: str | None = Field(None, description="experiment kind; default: from the sections")
    seed: int = Field(1, ge=0, description="seed of the traffic's random choices")
    seeds: list[int] | None = Field(None, min_length=1, max_length=MAX_SEEDS,
                                    description="run every variant once per seed")
    duration_s: float = Field(30, ge=1, le=3600, description="seconds of traffic a variant")


@dataclass(frozen=True)
class Scenario:
    """A validated scenario: its head and the experiment its kind parsed."""

    name: str
    description: str
    seed: int
    duration_s: float
    source: dict[str, Any]
    kind: str
    experiment: Experiment
    seeds: tuple[int, ...]

    @property
    def variants(self) -> tuple[Any, ...]:
        return self.experiment.variants

    @property
    def run_seeds(self) -> tuple[int, ...]:
        return self.seeds


def _head(data: dict, duration_override: float | None) -> Head:
    try:
        head = parse_section(Head, {k: data[k] for k in Head.model_fields if k in data})
    except ParamError as exc:
        raise ConfigError(exc.field, exc.reason) from None
    if duration_override is not None:
        if not 1 <= duration_override <= 3600:
            raise ConfigError("DURATION", f"must be 1..3600 seconds, got {duration_override!r}")
        head = head.model_copy(update={"duration_s": float(duration_override)})
    if head.seeds is not None and len(set(head.seeds)) != len(head.seeds):
        raise ConfigError("seeds", f"repeat: {head.seeds}")
    if head.seeds is not None and any(s < 0 for s in head.seeds):
        raise ConfigError("seeds", f"must be integers of 0 or more, got {head.seeds}")
    return head


def _check_keys(data: dict, kind: str, cls: type[Experiment]) -> None:
    """Every top-level key belongs to the head or to the scenario's kind."""
    mine = set(Head.model_fields) | set(cls.SECTIONS)
    for key in data:
        if key in mine:
            continue
        for other, other_cls in experiments.all_kinds().items():
            if other != kind and key in other_cls.SECTIONS:
                where = next((k for k in cls.SECTIONS if k in data), kind)
                raise ConfigError(key, f"not used by a {kind} scenario (it is set in "
                                       f"'{where}')")
        raise ConfigError(key, f"unknown field (known: {', '.join(sorted(mine))})")


def parse(data: Any, duration_override: float | None = None,
          seeds_override: list[int] | None = None) -> Scenario:
    """Validate a scenario already loaded from YAML; raises :class:`ConfigError`.
    ``seeds_override`` replaces the file's ``seeds`` (judge on seeds it was not tuned on)."""
    if not isinstance(data, dict):
        raise ConfigError("scenario", "must be a YAML mapping")
    if seeds_override is not None:
        data = {**data, "seeds": seeds_override}
    head = _head(data, duration_override)
    kind = experiments.kind_of(data)
    cls = experiments.get(kind)
    _check_keys(data, kind, cls)
    seeds = tuple(head.seeds) if head.seeds else (head.seed,)
    sections = {k: data[k] for k in cls.SECTIONS if k in data}
    experiment = cls(sections, name=head.name, seed=head.seed, seeds=seeds,
                     duration_s=head.duration_s)
    return Scenario(name=head.name, description=head.description.strip(), seed=head.seed,
                    duration_s=head.duration_s, source=data, kind=kind,
                    experiment=experiment, seeds=seeds)


def load(path: Path | str, duration_override: float | None = None,
         seeds_override: list[int] | None = None) -> Scenario:
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
    return parse(data, duration_override, seeds_override)
