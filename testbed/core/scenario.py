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

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from testbed import REPO, experiments
from testbed.errors import ConfigError
from testbed.experiments.base import Experiment
from testbed.experiments.fabric.schema import Name
from testbed.monitor.schema import Watching
from topologies import plugins
from topologies.params import ParamError, Section, clip
from topologies.params import parse as parse_section

MAX_SEEDS = 10


def path_of(name: str) -> Path:
    """A scenario given by name (``scenarios/NAME.yaml``) or by path."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    for base in (Path.cwd() / "scenarios", REPO / "scenarios"):
        if (base / f"{name}.yaml").exists():
            return base / f"{name}.yaml"
    known = sorted(p.stem for p in (REPO / "scenarios").glob("*.yaml"))
    raise ConfigError("SCENARIO", f"no scenario named {name!r} (known: {', '.join(known)})")


class Head(Section):
    """The keys every scenario has, whatever its kind."""

    name: Name = Field(description="lowercase letters, digits, '-' or '_'")
    description: str = Field("", description="what the scenario measures, in a few "
                                             "sentences (testbed scenarios shows it)")
    kind: str | None = Field(None, description="experiment kind; default: from the sections")
    seed: int = Field(1, ge=0, description="seed of the traffic's random choices")
    seeds: list[int] | None = Field(None, min_length=1, max_length=MAX_SEEDS,
                                    description="run every variant once per seed")
    duration_s: float = Field(30, ge=1, le=3600, description="seconds of traffic a variant")
    monitor: Watching = Field(Watching(), description="watch the run live: metrics, a "
                              "dashboard and Prometheus (fabric variants)")
    servers: list[str] | None = Field(None, max_length=63, description="other machines a "
                                      "fabric lab is spread over, each [user@]host[:port] "
                                      "(testbed up; this machine is the first)")


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
    monitor: Watching = Watching()
    #: the other machines a fabric lab is spread over (``[user@]host[:port]``)
    servers: tuple[str, ...] = ()
    #: the variants picked to run (``testbed run --variant``); empty: every variant
    picked: tuple[str, ...] = ()

    @property
    def variants(self) -> tuple[Any, ...]:
        """The variants to run, in the file's order: the picked ones, else all."""
        return tuple(v for v in self.experiment.variants
                     if not self.picked or v.name in self.picked)

    def only(self, names: Sequence[str]) -> Scenario:
        """This scenario with only the variants called ``names`` (``testbed run
        --variant``: run a variant again, or only those a question compares);
        ConfigError naming ``--variant`` for an unknown name or a kind whose variants
        are one experiment."""
        for name in names:
            self.variant(name)  # one of the file's, or the error lists them
        if not self.experiment.SOME_VARIANTS:
            raise ConfigError("--variant", f"a {self.kind} scenario runs all its variants "
                                           "together (its summary compares them)")
        return replace(self, picked=tuple(v.name for v in self.experiment.variants
                                          if v.name in names))

    @property
    def run_seeds(self) -> tuple[int, ...]:
        return self.seeds

    def variant(self, name: str | None) -> Any:
        """The variant called ``name`` (None: the first); ConfigError naming ``--variant``
        otherwise."""
        if name is None:
            return self.variants[0]
        for v in self.variants:
            if v.name == name:
                return v
        raise ConfigError("--variant", f"no variant {name!r} in {self.name} (variants: "
                                       f"{', '.join(v.name for v in self.variants)})")


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
    from testbed.cluster.servers import parse_all

    parse_all(head.servers)  # each written as a server, each once
    return head


def _check_keys(data: dict, kind: str, cls: type[Experiment]) -> None:
    """Every top-level key belongs to the head or to the scenario's kind."""
    mine = set(Head.model_fields) | set(cls.SECTIONS)
    for key in data:
        if key in mine:
            continue
        for other in experiments.KINDS:
            if other != kind and key in experiments.sections_of(other):
                where = next((k for k in cls.SECTIONS if k in data), kind)
                raise ConfigError(key, f"not used by a {kind} scenario (it is set in "
                                       f"'{where}')")
        raise ConfigError(key, f"unknown field (known: {', '.join(sorted(mine))})")


def _no_nul(data: Any, where: str = "") -> None:
    """ConfigError naming the first string (a value or a key) that holds a NUL byte: no
    command line (a workload's argv), file name or interface name can carry one, so it
    would fail only when the run starts it.

    >>> _no_nul({"workloads": [{"argv": ["ping", "-c1\\x00"]}]})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    testbed.errors.ConfigError: workloads[0].argv[1]: holds a NUL byte (\\0), which no ...
    """
    if isinstance(data, str):
        if "\0" in data:
            raise ConfigError(where or "scenario", "holds a NUL byte (\\0), which no command "
                                                   "line, file name or interface name can carry")
    elif isinstance(data, dict):
        for key, value in data.items():
            field = f"{where}.{key}" if where else str(key)
            if isinstance(key, str) and "\0" in key:
                raise ConfigError(clip(repr(field), 80), "a key holds a NUL byte (\\0)")
            _no_nul(value, field)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            _no_nul(item, f"{where}[{i}]")


def parse(data: Any, duration_override: float | None = None,
          seeds_override: list[int] | None = None, rate_factor: float = 1.0) -> Scenario:
    """Validate a scenario already loaded from YAML; raises :class:`ConfigError`.
    ``seeds_override`` replaces the file's ``seeds`` (judge on seeds it was not tuned on);
    ``rate_factor`` below 1 scales every rate of it alike (``--fit``: the kind's
    ``scale_rates``), and the scaled document is what is validated and recorded."""
    if not isinstance(data, dict):
        raise ConfigError("scenario", "must be a YAML mapping")
    _no_nul(data)
    if seeds_override is not None:
        data = {**data, "seeds": seeds_override}
    head = _head(data, duration_override)
    kind = experiments.kind_of(data)
    cls = experiments.get(kind)
    _check_keys(data, kind, cls)
    if rate_factor != 1.0:
        data = cls.scale_rates(data, rate_factor)
    seeds = tuple(head.seeds) if head.seeds else (head.seed,)
    sections = {k: data[k] for k in cls.SECTIONS if k in data}
    experiment = cls(sections, name=head.name, seed=head.seed, seeds=seeds,
                     duration_s=head.duration_s)
    return Scenario(name=head.name, description=head.description.strip(), seed=head.seed,
                    duration_s=head.duration_s, source=data, kind=kind,
                    experiment=experiment, seeds=seeds, monitor=head.monitor,
                    servers=tuple(head.servers or ()))


#: bounds of a scenario document: the file, and the document with every alias expanded
MAX_FILE_BYTES = 1 << 20
MAX_NODES = 100_000  # mappings, sequences and scalars, each alias counted as what it names
MAX_TEXT = 4 << 20  # characters of every scalar, aliases expanded
MAX_DEPTH = 40


class _Loader(yaml.SafeLoader):
    """YAML's safe loader that refuses a key given twice in one mapping."""

    def construct_mapping(self, node, deep=False):
        seen: dict = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:  # an unhashable key: the constructor says so
                break
            if first is not key_node:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {clip(repr(key), 60)} (first on line "
                    f"{first.start_mark.line + 1})", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


#: characters of a number in a scenario (an integer of 64 bits has 20 with its sign;
#: Python refuses to read one of more than 4,300 digits)
MAX_NUMBER_CHARS = 32


_SCALARS = yaml.constructor.SafeConstructor()  # reads one scalar as the loader would


def _number_problem(node: yaml.ScalarNode) -> str | None:
    """Why a YAML integer or float cannot be one of a scenario's numbers (too long to
    read, or infinite / not a number), or None."""
    if node.tag not in ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float"):
        return None
    if len(node.value) > MAX_NUMBER_CHARS:
        return (f"a number of {len(node.value)} characters (at most {MAX_NUMBER_CHARS}), "
                f"got {clip(node.value, 24)}")
    if node.tag.endswith("float") and not math.isfinite(_SCALARS.construct_yaml_float(node)):
        return f"must be a finite number, got {node.value}"
    return None


def _bounded(root: yaml.Node, where: str) -> None:
    """ConfigError when the document, aliases expanded, is over the bounds (a billion
    laughs), nests deeper than MAX_DEPTH or refers to itself, or holds a number that is
    too long or not finite (naming its field); computed on the node graph, each node
    once, so that checking cannot be made slow."""
    sizes: dict[int, tuple[int, int, int]] = {}  # id -> (nodes, characters, depth)
    active: set[int] = set()

    def walk(node: yaml.Node, field: str) -> tuple[int, int, int]:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in active:
            raise ConfigError(f"{where}:{node.start_mark.line + 1}", "an alias refers to "
                                                                     "the node it is in")
        if len(active) >= MAX_DEPTH:
            raise ConfigError(f"{where}:{node.start_mark.line + 1}",
                              f"nested deeper than {MAX_DEPTH} levels")
        active.add(key)
        if isinstance(node, yaml.ScalarNode):
            problem = _number_problem(node)
            if problem:
                raise ConfigError(field or f"{where}:{node.start_mark.line + 1}", problem)
            found = (1, len(node.value), 0)
        else:
            if isinstance(node, yaml.MappingNode):
                children = []
                for k, v in node.value:
                    name = clip(str(k.value), 40) if isinstance(k, yaml.ScalarNode) else "?"
                    children += [(k, field), (v, f"{field}.{name}" if field else name)]
            else:
                children = [(c, f"{field}[{i}]") for i, c in enumerate(node.value)]
            nodes, text, depth = 1, 0, 0
            for child, child_field in children:
                n, t, d = walk(child, child_field)
                nodes, text, depth = nodes + n, text + t, max(depth, d)
            found = (nodes, text, depth + 1)
        active.discard(key)
        if found[0] > MAX_NODES or found[1] > MAX_TEXT:
            raise ConfigError(where, f"over {MAX_NODES} values or {MAX_TEXT >> 20} M "
                                     "characters with its aliases expanded")
        sizes[key] = found
        return found

    walk(root, "")


def read(path: Path | str) -> Any:
    """A scenario file's YAML document, not yet validated: UTF-8, at most MAX_FILE_BYTES,
    no key twice in a mapping, bounded when its aliases are expanded (:func:`_bounded`);
    every problem a one-line ConfigError."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise ConfigError(str(path), exc.strerror or "cannot be read") from exc
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(path.name, f"over {MAX_FILE_BYTES >> 20} MB: not a scenario file")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise ConfigError(f"{path.name}:{line}", f"not UTF-8 text (byte {exc.start} is "
                                                 f"0x{raw[exc.start]:02x})") from None
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _bounded(node, path.name)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path.name}:{mark.line + 1}" if mark else path.name
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise ConfigError(where, f"YAML syntax: {clip(problem, 200)}") from None
    except RecursionError:
        raise ConfigError(path.name, f"nested deeper than {MAX_DEPTH} levels") from None
    finally:
        loader.dispose()


def load(path: Path | str, duration_override: float | None = None,
         seeds_override: list[int] | None = None, rate_factor: float = 1.0) -> Scenario:
    """Read and validate a scenario file (plug-ins it names may live beside it)."""
    plugins.add_folder(Path(path).parent)
    return parse(read(path), duration_override, seeds_override, rate_factor)


def plugin_references(data: Any, where: str = "") -> list[tuple[str, str]]:
    """(field, reference) of every plug-in a scenario document names: a dotted ``kind``,
    a ``package.module:Class`` builder or backbone topology, controller ``apps``, a
    ``package.module:Class`` fault action, workload kind or routing mode, wherever they
    are (variants included)."""
    from testbed.faults import kinds

    found: list[tuple[str, str]] = []
    if isinstance(data, dict):
        for key, value in data.items():
            field = f"{where}.{key}" if where else str(key)
            if key == "kind" and not where and isinstance(value, str) \
                    and value not in experiments.KINDS:
                found.append((field, value))
            elif key == "kind" and where and isinstance(value, str) \
                    and plugins.DOTTED.fullmatch(value):  # a workload kind of one's own
                found.append((field, value))
            elif key == "builder" and isinstance(value, str) and ":" in value:
                found.append((field, value))
            elif key == "topology" and isinstance(value, str) \
                    and plugins.DOTTED.fullmatch(value):  # a backbone topology of one's own
                found.append((field, value))
            elif key == "action" and isinstance(value, str) and ":" in value \
                    and value not in kinds.KINDS:
                found.append((field, value))
            elif key == "mode" and where.endswith("controller") and isinstance(value, str) \
                    and plugins.DOTTED.fullmatch(value):  # a routing mode of one's own
                found.append((field, value))
            elif key == "apps" and isinstance(value, list):
                found += [(f"{field}[{i}]", app) for i, app in enumerate(value)
                          if isinstance(app, str)]
            else:
                found += plugin_references(value, field)
    elif isinstance(data, list):
        for i, item in enumerate(data):
            found += plugin_references(item, f"{where}[{i}]")
    return found


def validate(path: Path | str) -> tuple[str, str]:
    """``testbed validate``: (scenario name, what was found), without running any code the
    scenario names: every plug-in it names is checked statically
    (:func:`topologies.plugins.check`, ConfigError when one is bad); what depends on a
    plug-in (its sections, the topology a builder returns) is checked when ``testbed run``
    or ``testbed up`` loads it, before anything is created."""
    plugins.add_folder(Path(path).parent)
    data = read(path)
    found = []
    for field, reference in plugin_references(data):
        default = "EXPERIMENT" if field == "kind" else None
        try:
            source = plugins.check(reference, field, default)
        except ParamError as exc:
            raise ConfigError(exc.field, exc.reason) from None
        found.append(f"{reference} ({plugins.relative(source)})")
    try:
        sc = parse(data)
    except plugins.NotLoaded:
        name = data.get("name", "?") if isinstance(data, dict) else "?"
        return str(name), (f"checked as far as it can be without running code; it names "
                           f"plug-ins (found, not loaded): {', '.join(found)}; testbed run "
                           "and testbed up load them first and check the rest")
    extra = f"; plug-ins (found, not loaded): {', '.join(found)}" if found else ""
    return sc.name, f"valid, {sc.experiment.describe()}{extra}"
