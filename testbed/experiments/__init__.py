"""The experiment kinds, by name: the runner looks a scenario's kind up here, nowhere else.

Adding a kind: one module with a subclass of :class:`~testbed.experiments.base.Experiment`
bound to the module-level name ``EXPERIMENT``, and one line ``KINDS.add("name",
"package.module")`` (or a call of :func:`register`). A scenario can also name a kind that
lives outside the testbed by its module's dotted path (``kind: examples.kinds.pingmesh``,
the tiny example kind that ``tests/integration/test_experiments.py`` runs).
"""

from __future__ import annotations

from testbed.errors import ConfigError
from testbed.experiments.base import Experiment
from topologies import plugins
from topologies.params import ParamError

#: the experiment kinds by name (:class:`topologies.plugins.Registry`, the shape every
#: extension axis has): the testbed's own are imported when first asked for
KINDS = plugins.Registry("experiment kind", Experiment, key="KIND", default="EXPERIMENT")
#: the top-level sections each built-in kind reads: a scenario's kind is found without
#: importing every kind (each loads its run code: netlink, Scapy, networkx, about half a
#: second of a CLI start); tests/unit/test_experiments.py holds them to each SECTIONS
BUILT_IN_SECTIONS: dict[str, tuple[str, ...]] = {
    "fabric": ("topology", "controller", "agents", "training", "qos", "switches",
               "acceptance", "replacement", "faults", "workloads", "variants", "capture"),
    "macsec": ("macsec",),
    "backbone": ("backbone",),
    "storage": ("storage",),
}
for _kind in BUILT_IN_SECTIONS:
    KINDS.add(_kind, f"testbed.experiments.{_kind}.run")
DEFAULT_KIND = "fabric"
#: a kind named by the dotted path of its module (a plug-in outside the testbed)
DOTTED = plugins.MODULE


def register(kind: str, module: str) -> None:
    """Make ``kind`` known as the ``EXPERIMENT`` of ``module`` (a plug-in, or a test's
    example kind)."""
    BUILT_IN_SECTIONS.pop(kind, None)  # its own sections now
    KINDS.add(kind, module)


def get(kind: str) -> type[Experiment]:
    """The Experiment subclass of ``kind`` (a registered name, or the dotted path of a
    module that defines ``EXPERIMENT``); ConfigError otherwise."""
    try:
        return KINDS.resolve(kind, "kind")
    except ParamError as exc:
        raise ConfigError(exc.field, exc.reason) from None


def all_kinds() -> dict[str, type]:
    return {kind: get(kind) for kind in KINDS}


def sections_of(kind: str) -> tuple[str, ...]:
    """The top-level keys ``kind`` reads (a built-in kind's without importing it)."""
    if kind in BUILT_IN_SECTIONS:
        return BUILT_IN_SECTIONS[kind]
    return tuple(get(kind).SECTIONS)


def kind_of(data: dict) -> str:
    """The kind a scenario selects: its ``kind:`` key, else the kind whose sections it
    has (one kind only), else :data:`DEFAULT_KIND`."""
    if "kind" in data:
        kind = data["kind"]
        if not isinstance(kind, str):
            raise ConfigError("kind", f"must be a string, got {kind!r}")
        get(kind)
        return kind
    found: list[tuple[str, str]] = []
    for kind in KINDS:
        if kind == DEFAULT_KIND:
            continue
        keys = [k for k in sections_of(kind) if k in data]
        if keys:
            found.append((kind, keys[0]))
    if len(found) > 1:
        raise ConfigError(found[1][1], f"a scenario runs one experiment, and "
                                       f"{found[0][1]!r} is set")
    return found[0][0] if found else DEFAULT_KIND
