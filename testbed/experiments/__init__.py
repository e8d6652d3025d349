"""The experiment kinds, by name: the runner looks a scenario's kind up here, nowhere else.

Adding a kind: one module with a subclass of :class:`~testbed.experiments.base.Experiment`
bound to the module-level name ``EXPERIMENT``, and one entry ``"name": "package.module"``
in :data:`KINDS` (or a call of :func:`register`). A scenario can also name a kind that
lives outside the testbed by its module's dotted path (``kind: examples.kinds.pingmesh``,
the tiny example kind that ``tests/integration/test_experiments.py`` runs).
"""

from __future__ import annotations

import importlib
import re

from testbed.errors import ConfigError
from topologies import plugins
from topologies.params import ParamError

#: kind name -> module whose ``EXPERIMENT`` is the kind's Experiment subclass
KINDS: dict[str, str] = {
    "fabric": "testbed.experiments.fabric.run",
    "macsec": "testbed.experiments.macsec.run",
    "backbone": "testbed.experiments.backbone.run",
    "storage": "testbed.experiments.storage.run",
}
DEFAULT_KIND = "fabric"


def register(kind: str, module: str) -> None:
    """Make ``kind`` known (a plug-in or a test's example kind)."""
    KINDS[kind] = module


#: a kind named by the dotted path of its module (a plug-in outside the testbed)
DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+$")


def get(kind: str):
    """The Experiment subclass of ``kind`` (a registered name, or the dotted path of a
    module that defines ``EXPERIMENT``); ConfigError otherwise."""
    from testbed.experiments.base import Experiment

    if kind not in KINDS and not DOTTED.fullmatch(kind):
        raise ConfigError("kind", f"unknown experiment kind {kind!r} (known: "
                                  f"{', '.join(sorted(KINDS))}, or a module's dotted path)")
    if kind in KINDS:  # the testbed's own
        module = importlib.import_module(KINDS[kind])
    else:
        try:
            module = plugins.load(kind, "kind")
        except ParamError as exc:
            raise ConfigError("kind", exc.reason) from None
    cls = getattr(module, "EXPERIMENT", None)
    if not (isinstance(cls, type) and issubclass(cls, Experiment)):
        raise ConfigError("kind", f"{kind!r} defines no EXPERIMENT (a subclass of "
                                  "testbed.experiments.base.Experiment)")
    return cls


def all_kinds() -> dict[str, type]:
    return {kind: get(kind) for kind in KINDS}


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
        keys = [k for k in get(kind).SECTIONS if k in data]
        if keys:
            found.append((kind, keys[0]))
    if len(found) > 1:
        raise ConfigError(found[1][1], f"a scenario runs one experiment, and "
                                       f"{found[0][1]!r} is set")
    return found[0][0] if found else DEFAULT_KIND
