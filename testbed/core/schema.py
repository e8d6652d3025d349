"""The scenario format as a JSON Schema (``testbed schema``), for editors and checks.

Built from the same pydantic models that validate a scenario: the head (name, seeds,
duration) and every section of every registered kind. Editors that speak JSON Schema
(the YAML language server: ``# yaml-language-server: $schema=scenario.schema.json``)
then complete and check scenario files as they are typed. Rules that need the built
topology (node indices, fault targets) are checked by ``testbed validate`` only.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, TypeAdapter

from testbed import experiments
from testbed.core.scenario import Head

DIALECT = "https://json-schema.org/draft/2020-12/schema"


def _schema(value: Any, defs: dict) -> dict:
    """A section's schema: a model (its definitions hoisted into ``defs``), or a plain
    schema dict whose ``items`` / ``properties`` may hold models."""
    if isinstance(value, type) and issubclass(value, BaseModel):
        schema = value.model_json_schema(ref_template="#/$defs/{model}", by_alias=True)
        defs.update(schema.pop("$defs", {}))
        return schema
    if not isinstance(value, dict):  # a type such as list[Workload]: pydantic's adapter
        schema = TypeAdapter(value).json_schema(ref_template="#/$defs/{model}",
                                                by_alias=True)
        defs.update(schema.pop("$defs", {}))
        return schema
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            if key in ("items", "additionalProperties"):
                out[key] = _schema(item, defs)
            elif key in ("properties",):
                out[key] = {k: _schema(v, defs) for k, v in item.items()}
            elif key in ("anyOf", "oneOf"):
                out[key] = [_schema(v, defs) for v in item]
            else:
                out[key] = item
        return out
    return value


def scenario_schema() -> dict:
    """The JSON Schema of a scenario file (every kind's sections are optional keys)."""
    defs: dict = {}
    root = _schema(Head, defs)
    properties = dict(root["properties"])
    kinds = experiments.all_kinds()
    dotted = experiments.DOTTED.pattern
    properties["kind"] = {"type": "string",
                          "anyOf": [{"enum": sorted(kinds)}, {"pattern": dotted}],
                          "description": "experiment kind (default: from the sections), or "
                                         "the dotted path of a plug-in kind's module"}
    for kind, cls in kinds.items():
        for key, section in cls.SECTIONS.items():
            schema = _schema(section, defs)
            schema.setdefault("description", f"{kind} experiment")
            properties[key] = schema
    return {
        "$schema": DIALECT,
        "title": "AI fabric testbed scenario",
        "type": "object",
        "required": ["name"],
        "properties": properties,
        # a plug-in kind's sections are its own: allowed where kind is a dotted path
        "if": {"required": ["kind"], "properties": {"kind": {"pattern": dotted}}},
        "then": {"patternProperties": {"": {}}},
        "unevaluatedProperties": False,
        "$defs": defs,
    }
