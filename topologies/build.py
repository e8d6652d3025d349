"""One entry point from a scenario's ``topology:`` section to a spec.

``builder`` chooses the builder: ``leaf-spine`` (the default), ``fat-tree``,
``explicit`` (also chosen when ``nodes`` is a mapping), or ``package.module:Class``, a
builder of your own. Builders are one registry (:data:`BUILDERS`, the shape of every
extension axis: :class:`topologies.plugins.Registry`): each is a :class:`Builder`, which
declares the section's keys as a pydantic model (``Params``, whose JSON Schema
``testbed schema`` prints) and builds the spec from them. A spec of one's own builder is
checked like any other (:func:`topologies.graph.check_spec`). Every problem is a
:class:`~topologies.params.ParamError` whose field is relative to the topology section
(``k``, ``links[3].endpoints[1]``), which the scenario prefixes with where the section
is (``variants[2].topology``).

>>> build_topology({"builder": "fat-tree", "k": 4}, "tbdemo").counts()
{'switches': 20, 'hosts': 16, 'links': 48}
>>> build_topology({}, "tbdemo").counts()  # the leaf-spine with the scenario defaults
{'switches': 8, 'hosts': 8, 'links': 24}
>>> build_topology({"builder": "fat-tree", "k": 5}, "tbdemo")
Traceback (most recent call last):
...
topologies.spec.TopologyError: k: must be even (half of each switch's ports face down), got 5
>>> build_topology({"builder": "star"}, "tbdemo")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
topologies.spec.TopologyError: builder: unknown builder 'star' (known: leaf-spine, ...)
"""

from __future__ import annotations

from typing import ClassVar

from topologies import explicit, fattree, leafspine, plugins
from topologies.graph import check_spec
from topologies.params import ParamError, Section, parse
from topologies.spec import FabricSpec, TopologyError


class Builder:
    """A topology builder: the ``topology:`` keys it takes (``Params``: a pydantic model,
    every field with a default and a description) and the spec it builds of them, every
    name starting with ``prefix``. A builder of one's own subclasses it, gives it a
    ``NAME`` and is named in a scenario as ``builder: package.module:Class``
    (examples/builders/ring.py)."""

    NAME: ClassVar[str] = ""
    Params: ClassVar[type[Section]] = Section

    @classmethod
    def build(cls, params: Section, prefix: str) -> FabricSpec:
        raise NotImplementedError


#: every builder by name: the shipped ones, and those a scenario named (once loaded)
BUILDERS = plugins.Registry("builder", Builder)


@BUILDERS.register
class LeafSpine(Builder):
    """Planes of leaves and spines, rails by NIC (:mod:`topologies.leafspine`)."""

    NAME, Params = leafspine.NAME, leafspine.Params
    build = staticmethod(leafspine.build)


@BUILDERS.register
class FatTree(Builder):
    """A k-ary fat-tree (:mod:`topologies.fattree`)."""

    NAME, Params = fattree.NAME, fattree.Params
    build = staticmethod(fattree.build)


@BUILDERS.register
class Explicit(Builder):
    """Nodes and links as written (:mod:`topologies.explicit`)."""

    NAME, Params = explicit.NAME, explicit.Params
    build = staticmethod(explicit.build)


DEFAULT = LeafSpine.NAME
#: the ``topology:`` section as one JSON Schema: which builder, the rest is the builder's
#: (see :func:`builder_schemas`; a variant may override a few keys of its base's section,
#: so the parameters are checked by the builder's model once merged, not here)
TOPOLOGY_SCHEMA: dict = {
    "type": "object",
    "description": "the fabric's graph: builder (leaf-spine, fat-tree, explicit, or "
                   "package.module:Class; explicit when nodes is a mapping) and its "
                   "parameters",
    "properties": {"builder": {"type": "string", "default": DEFAULT,
                               "description": "leaf-spine, fat-tree, explicit, or "
                                              "package.module:Class"}},
}


def builder_schemas() -> dict[str, dict]:
    """The JSON Schema of each shipped builder's parameters, by builder name."""
    return {name: BUILDERS[name].Params.model_json_schema() for name in SHIPPED}


#: the builders the lab ships (a scenario's own register beside them once loaded)
SHIPPED = tuple(BUILDERS)


def builder_of(section: dict | None) -> str:
    """The builder a section names: ``builder``, else explicit for a ``nodes`` mapping,
    else the leaf-spine.

    >>> builder_of({"nodes": {"h1": {"kind": "host"}}}), builder_of({"nodes": 8})
    ('explicit', 'leaf-spine')
    """
    section = section or {}
    if "builder" in section:
        return section["builder"]
    return explicit.NAME if isinstance(section.get("nodes"), dict) else DEFAULT


def resolve(section: dict | None) -> dict:
    """The section with its builder named and every default filled in (a shipped
    builder's), or as given (a builder of one's own: validation loads no code, so its
    keys are checked when the run loads it); ParamError if malformed.

    >>> resolve({"builder": "fat-tree"})  # doctest: +NORMALIZE_WHITESPACE
    {'builder': 'fat-tree', 'k': 4, 'planes': 1, 'link_mbps': 100.0, 'mtu': 9000,
     'queue_kb': 64, 'delay_ms': 0.0}
    """
    name, params = _split(section)
    if name in SHIPPED:
        return {"builder": name, **parse(BUILDERS[name].Params, params).model_dump()}
    if name not in BUILDERS and not BUILDERS.is_reference(name):
        _builder(name)  # unknown: the registry's one-line error
    return {"builder": name, **params}


def _split(section: dict | None) -> tuple[str, dict]:
    """The builder a section names, and its other keys."""
    name = builder_of(section)
    if not isinstance(name, str):
        raise TopologyError("builder", f"must be a string, got {name!r}")
    return name, {k: v for k, v in (section or {}).items() if k != "builder"}


def _builder(name: str) -> type[Builder]:
    """The builder class ``name`` names (a reference is loaded: refused in a validation)."""
    try:
        return BUILDERS.resolve(name, "builder")
    except ParamError as exc:
        raise TopologyError("builder", exc.reason) from None


def build_topology(section: dict | None, prefix: str) -> FabricSpec:
    """The spec of a scenario's ``topology:`` section; every name starts with ``prefix``."""
    name, params = _split(section)
    builder = _builder(name)
    spec = builder.build(parse(builder.Params, params), prefix)
    if not isinstance(spec, FabricSpec):
        raise TopologyError("builder", f"{builder.__qualname__}.build returned "
                                       f"{type(spec).__name__}, not a FabricSpec")
    if builder.NAME not in SHIPPED:
        check_spec(spec)
    return spec
