"""The generated references of the docs site: the scenario file from ``testbed schema``,
the command line from ``testbed``'s argument parser and the results folder from
:mod:`testbed.core.records`, as Markdown.

The docs build (``docs/hooks.py``) writes both at build time, so a key or an option added
to the code shows up in the docs by itself; :func:`undescribed` and
:func:`undocumented_arguments` list what still lacks a description.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator


def _resolve(node: dict, defs: dict) -> dict:
    ref = node.get("$ref")
    if ref and ref.startswith("#/$defs/"):
        return {**defs[ref.split("/")[-1]], **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _objects(node: dict, defs: dict) -> list[dict]:
    """The object schemas a property can hold (itself, or the members of an anyOf)."""
    node = _resolve(node, defs)
    out = []
    for member in node.get("anyOf", []) + node.get("oneOf", []) + [node]:
        member = _resolve(member, defs)
        if member.get("type") == "object" and member.get("properties"):
            out.append(member)
        items = member.get("items")
        if isinstance(items, dict):
            items = _resolve(items, defs)
            if items.get("type") == "object" and items.get("properties"):
                out.append(items)
            out += [_resolve(m, defs) for m in items.get("anyOf", []) + items.get("oneOf", [])
                    if _resolve(m, defs).get("properties")]
    unique, seen = [], set()
    for obj in out:
        key = json.dumps(sorted(obj["properties"]))
        if key not in seen:
            seen.add(key)
            unique.append(obj)
    return unique


def _type(node: dict, defs: dict) -> str:
    node = _resolve(node, defs)
    if "enum" in node:
        return " \\| ".join(f"`{v}`" for v in node["enum"])
    if "const" in node:
        return f"`{node['const']}`"
    members = node.get("anyOf") or node.get("oneOf")
    if members:
        return " or ".join(dict.fromkeys(_type(m, defs) for m in members))
    kind = node.get("type", "object" if node.get("properties") else "any")
    if kind == "array":
        items = node.get("items")
        return f"list of {_type(items, defs)}" if isinstance(items, dict) else "list"
    return str(kind) if not isinstance(kind, list) else " or ".join(kind)


def _range(node: dict) -> str:
    parts = []
    for key, word in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                      ("exclusiveMaximum", "<"), ("minItems", "items >="),
                      ("maxItems", "items <="), ("maxLength", "length <=")):
        if key in node:
            parts.append(f"{word} {node[key]}")
    if "pattern" in node:
        parts.append(f"pattern `{node['pattern']}`")
    return ", ".join(parts)


def _ranges(node: dict, defs: dict) -> str:
    node = _resolve(node, defs)
    found = [_range(_resolve(m, defs)) for m in (node.get("anyOf") or [])] + [_range(node)]
    return "; ".join(r for r in dict.fromkeys(found) if r)


def properties(schema: dict) -> Iterator[tuple[str, dict]]:
    """(dotted path, property schema) of every property, nested ones included; list
    items are ``path[]``.

    >>> schema = {"properties": {"a": {"type": "object", "properties": {"b": {}}}}}
    >>> [p for p, _ in properties(schema)]
    ['a', 'a.b']
    """
    defs = schema.get("$defs", {})

    def walk(node: dict, prefix: str, depth: int) -> Iterator[tuple[str, dict]]:
        if depth > 8:
            return
        for name, prop in node.get("properties", {}).items():
            path = f"{prefix}{name}"
            yield path, prop
            for obj in _objects(prop, defs):
                listed = _resolve(prop, defs).get("type") == "array" or any(
                    _resolve(m, defs).get("type") == "array"
                    for m in _resolve(prop, defs).get("anyOf", []))
                yield from walk(obj, f"{path}[]." if listed else f"{path}.", depth + 1)

    seen = set()
    for path, prop in walk(schema, "", 0):
        if path not in seen:
            seen.add(path)
            yield path, prop


def _description(prop: dict, defs: dict) -> str:
    prop_r = _resolve(prop, defs)
    return (prop.get("description") or prop_r.get("description") or "").strip()


def undescribed(schema: dict) -> list[str]:
    """The properties without a description."""
    defs = schema.get("$defs", {})
    return [path for path, prop in properties(schema) if not _description(prop, defs)]


def scenario_reference(schema: dict) -> str:
    """The scenario-file reference: one table row per key, nested keys by dotted path."""
    defs = schema.get("$defs", {})
    lines = ["# Scenario file reference", "",
             "Generated from `testbed schema` when the docs are built: every key a scenario "
             "file may hold, with its type, default, range and meaning. Nested keys are "
             "written with dots (`topology.planes`), list items with `[]` "
             "(`faults[].at_s`). `testbed validate FILE` checks a file against it; "
             "`testbed schema -o scenario.schema.json` gives the schema to an editor.", "",
             "| key | type | default | range | meaning |", "|---|---|---|---|---|"]
    for path, prop in properties(schema):
        default = prop.get("default", _resolve(prop, defs).get("default"))
        shown = "" if default is None else f"`{json.dumps(default)}`"
        cell = _description(prop, defs).replace("|", "\\|").replace("\n", " ")
        lines.append(f"| `{path}` | {_type(prop, defs)} | {shown} | "
                     f"{_ranges(prop, defs).replace('|', chr(92) + '|')} | {cell} |")
    return "\n".join(lines) + "\n"


def _subcommands(parser: argparse.ArgumentParser,
                 prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every command by its words (``run``; ``results`` and ``results serve``)."""
    out: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out[prefix + name] = sub
                out.update(_subcommands(sub, f"{prefix}{name} "))
    return out


def _helps(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for a in action._choices_actions:
                out[prefix + a.dest] = a.help or ""
            for name, sub in action.choices.items():
                out.update(_helps(sub, f"{prefix}{name} "))
    return out


def _arguments(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._VersionAction,
                               argparse._SubParsersAction)):
            continue
        yield action


def undocumented_arguments(parser: argparse.ArgumentParser) -> list[str]:
    """``command argument`` of every argument without help text."""
    return [f"{name} {a.option_strings[0] if a.option_strings else a.dest}"
            for name, sub in _subcommands(parser).items()
            for a in _arguments(sub) if not a.help]


def cli_reference(parser: argparse.ArgumentParser) -> str:
    """The command-line reference: each command's usage, what it does and its arguments."""
    helps = _helps(parser)
    lines = ["# Command-line reference", "",
             "Generated from `testbed`'s argument parser when the docs are built. The "
             "command is `.venv/bin/testbed` after `make setup`. Bad input ends with one "
             "line naming the field and exit status 2.", ""]
    for name, sub in _subcommands(parser).items():
        lines += [f"## testbed {name}", "", helps.get(name, ""), "", "```",
                  sub.format_usage().strip().replace("usage: ", ""), "```", ""]
        rows = []
        for action in _arguments(sub):
            flag = ", ".join(action.option_strings) or action.dest
            default = action.default
            shown = "" if default in (None, False, argparse.SUPPRESS) else f"`{default}`"
            rows.append(f"| `{flag}` | {shown} | {(action.help or '').replace('|', '/')} |")
        if rows:
            lines += ["| argument | default | meaning |", "|---|---|---|", *rows, ""]
        if sub.epilog:
            lines += [sub.epilog, ""]
    return "\n".join(lines)


def markdown_pages() -> dict[str, str]:
    """The generated pages, by their path under the docs folder."""
    from testbed.core.cli import build_parser
    from testbed.core.record_checks import reference_page
    from testbed.core.schema import scenario_schema

    return {"reference/scenario-file.md": scenario_reference(scenario_schema()),
            "reference/cli.md": cli_reference(build_parser()),
            "reference/results.md": reference_page()}
