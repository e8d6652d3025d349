"""The experiment kinds, by name: the runner looks a scenario's kind up here, nowhere else.

Adding a kind: one module with a subclass of :class:`~testbed.experiments.base.Experiment`
bound to the module-level name ``EXPERIMENT``, and one entry ``"name": "package.module"``
in :data:`KINDS` (or a call of :func:`register`). ``tests/unit/test_experiments.py``
registers a tiny example kind that way.
"""

from __future__ import annotations

import importlib

from testbed.errors import ConfigError

#: kind name -> module whose ``EXPERIMENT`` is the kind's Experiment subclass
KINDS: dict[str, str] = {
    "fabric": "testbed.experiments.fabric",
    "macsec": "testbed.experiments.macsec",
    "backbone": "testbed.experiments.backbone",
}
DEFAULT_KIND = "fabric"


def register(kind: str, module: str) -> None:
    """Make ``kind`` known (a plug-in or a test's example kind)."""
    KINDS[kind] = module


def get(kind: str):
    """The Experiment subclass of ``kind``; ConfigError for an unknown kind."""
    if kind not in KINDS:
        raise ConfigError("kind", f"unknown experiment kind {kind!r} "
                                  f"(known: {', '.join(sorted(KINDS))})")
    try:
        module = importlib.import_module(KINDS[kind])
    except ImportError as exc:
        raise ConfigError("kind", f"experiment kind {kind!r} cannot be loaded: {exc}") from None
    return module.EXPERIMENT


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
