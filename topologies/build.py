"""One entry point from a scenario's ``topology:`` section to a spec.

``builder`` chooses the builder: ``leaf-spine`` (the default), ``fat-tree``,
``explicit`` (also chosen when ``nodes`` is a mapping), or ``package.module:function``,
a function of your own called with ``prefix=`` and the section's other keys that must
return a :class:`~topologies.spec.FabricSpec` (checked like any other,
:func:`topologies.graph.check_spec`). The shipped builders declare their parameters as a
pydantic model (``BUILDERS[name][0]``, whose JSON Schema ``testbed schema`` prints);
every problem is a :class:`~topologies.params.ParamError` whose field is relative to the
topology section (``k``, ``links[3].endpoints[1]``), which the scenario prefixes with
where the section is (``variants[2].topology``).

>>> build_topology({"builder": "fat-tree", "k": 4}, "tbdemo").counts()
{'switches': 20, 'hosts': 16, 'links': 48}
>>> build_topology({}, "tbdemo").counts()  # the leaf-spine with the scenario defaults
{'switches': 8, 'hosts': 8, 'links': 24}
>>> build_topology({"builder": "fat-tree", "k": 5}, "tbdemo")
Traceback (most recent call last):
...
topologies.spec.TopologyError: k: must be even (half of each switch's ports face down), got 5
>>> build_topology({"builder": "ring"}, "tbdemo")  # doctest: +ELLIPSIS
Traceback (most recent call last):
...
topologies.spec.TopologyError: builder: unknown builder 'ring' (known: leaf-spine, ...)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from topologies import explicit, fattree, leafspine, plugins
from topologies.graph import check_spec
from topologies.params import ParamError, Section, parse
from topologies.spec import FabricSpec, TopologyError

#: name -> (parameters model, build(params, prefix) -> spec)
BUILDERS: dict[str, tuple[type[Section], Callable[[Any, str], FabricSpec]]] = {
    leafspine.NAME: (leafspine.Params, leafspine.build),
    fattree.NAME: (fattree.Params, fattree.build),
    explicit.NAME: (explicit.Params, explicit.build),
}
DEFAULT = leafspine.NAME
#: the ``topology:`` section as one JSON Schema: which builder, the rest is the builder's
#: (see :func:`builder_schemas`; a variant may override a few keys of its base's section,
#: so the parameters are checked by the builder's model once merged, not here)
TOPOLOGY_SCHEMA: dict = {
    "type": "object",
    "description": "the fabric's graph: builder (leaf-spine, fat-tree, explicit, or "
                   "package.module:function; explicit when nodes is a mapping) and its "
                   "parameters",
    "properties": {"builder": {"type": "string", "default": DEFAULT,
                               "description": "leaf-spine, fat-tree, explicit, or "
                                              "package.module:function"}},
}


def builder_schemas() -> dict[str, dict]:
    """The JSON Schema of each shipped builder's parameters, by builder name."""
    return {name: model.model_json_schema() for name, (model, _) in BUILDERS.items()}


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
    builder's), or as given (a dotted-path builder's); ParamError if malformed.

    >>> resolve({"builder": "fat-tree"})  # doctest: +NORMALIZE_WHITESPACE
    {'builder': 'fat-tree', 'k': 4, 'planes': 1, 'link_mbps': 100.0, 'mtu': 9000,
     'queue_kb': 64, 'delay_ms': 0.0}
    """
    name = builder_of(section)
    params = {k: v for k, v in (section or {}).items() if k != "builder"}
    if not isinstance(name, str):
        raise TopologyError("builder", f"must be a string, got {name!r}")
    if name in BUILDERS:
        return {"builder": name, **parse(BUILDERS[name][0], params).model_dump()}
    if ":" not in name:
        raise TopologyError("builder", f"unknown builder {name!r} (known: "
                                       f"{', '.join(BUILDERS)}, or package.module:function)")
    return {"builder": name, **params}


def build_topology(section: dict | None, prefix: str) -> FabricSpec:
    """The spec of a scenario's ``topology:`` section; every name starts with ``prefix``."""
    resolved = resolve(section)
    name = resolved.pop("builder")
    if name in BUILDERS:
        model, build = BUILDERS[name]
        return build(model.model_validate(resolved), prefix)
    function = _import(name)
    try:
        inspect.signature(function).bind(prefix=prefix, **resolved)
    except ValueError:  # no signature to check (a builtin): the call will tell
        pass
    except TypeError as exc:
        raise TopologyError("builder", f"{name} does not take these parameters: {exc}") from None
    spec = function(prefix=prefix, **resolved)
    if not isinstance(spec, FabricSpec):
        raise TopologyError("builder", f"{name} returned {type(spec).__name__}, "
                                       "not a FabricSpec")
    check_spec(spec)
    return spec


def _import(name: str) -> Callable[..., Any]:
    """The function ``package.module:function`` of a plug-in module (found on the import
    path or in the current folder, :func:`topologies.plugins.load`)."""
    module_name, _, attr = name.partition(":")
    try:
        module = plugins.load(module_name, "builder")
    except ParamError as exc:
        raise TopologyError("builder", exc.reason) from None
    function = getattr(module, attr, None)
    if not callable(function):
        raise TopologyError("builder", f"{module_name!r} has no function {attr!r}")
    return function
