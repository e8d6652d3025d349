"""One schema mechanism for every scenario section: pydantic models, one-line errors.

Every section of a scenario file (a topology builder's parameters, the controller,
workloads, an experiment kind's section) is a pydantic model declared with
:class:`Section` as its base: strict types (no ``"5"`` for 5, no ``true`` for 1), no
unknown keys, ranges declared with ``Field``. :func:`parse` validates a mapping and
turns the *first* problem into a :class:`TopologyError`-shaped ``(field, reason)`` pair
whose field is the dotted path from the scenario's top (``variants[2].topology.k``), so
the command line can print one line and exit 2. The same models export the JSON Schema
that ``testbed schema`` prints.

>>> from pydantic import Field
>>> class Demo(Section):
...     k: int = Field(4, ge=2, le=16, description="switch radix")
...     name: str = "x"
>>> parse(Demo, {"k": 6}).k
6
>>> parse(Demo, {"k": 1}, where="topology")
Traceback (most recent call last):
...
topologies.params.ParamError: topology.k: must be 2 or more, got 1
>>> parse(Demo, {"k": "6"})
Traceback (most recent call last):
...
topologies.params.ParamError: k: must be an integer, got '6'
>>> parse(Demo, {"q": 1})
Traceback (most recent call last):
...
topologies.params.ParamError: q: unknown field (known: k, name)
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

M = TypeVar("M", bound=BaseModel)


class ParamError(ValueError):
    """A section's value is malformed or impossible; ``field`` names it (dotted path)."""

    def __init__(self, field_name: str, reason: str):
        field_name, reason = clip(str(field_name), 160), clip(str(reason), 400)
        super().__init__(f"{field_name}: {reason}")
        self.field = field_name
        self.reason = reason


def clip(text: str, limit: int) -> str:
    """``text`` on one line, at most ``limit`` characters (a quoted value is cut short).

    >>> clip("a\\nb", 10), clip("x" * 20, 10)
    ('a b', 'xxxxxxx...')
    """
    text = " ".join(text.split()) if "\n" in text else text
    return text if len(text) <= limit else text[:limit - 3] + "..."


class Section(BaseModel):
    """Base of every scenario section: strict, closed, immutable once parsed."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True,
                              validate_default=False, allow_inf_nan=False)


def join(where: str, loc: tuple[Any, ...] | list[Any]) -> str:
    """A dotted field path: ``join("variants[1]", ("links", 3, "b"))`` is
    ``variants[1].links[3].b``.

    >>> join("", ("a", 0, "b")), join("x", ())
    ('a[0].b', 'x')
    """
    out = where
    for part in loc:
        if part == "[key]":  # pydantic's marker for a bad mapping key: the key names it
            continue
        if isinstance(part, str) and "[" in part:  # a union's branch tag, list[Model]
            continue
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out = f"{out}.{part}" if out else str(part)
    return out


_TYPE_WORDS = {
    "int_type": "an integer", "int_parsing": "an integer", "int_from_float": "an integer",
    "float_type": "a number", "float_parsing": "a number", "bool_type": "true or false",
    "string_type": "a string", "dict_type": "a mapping", "list_type": "a list",
    "model_type": "a mapping", "model_attributes_type": "a mapping", "tuple_type": "a list",
}


def _num(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def reason(error: dict) -> str:
    """Our wording of one pydantic error (without the field): what it must be, and what
    it got."""
    kind, ctx, got = error["type"], error.get("ctx") or {}, error.get("input")
    if kind in _TYPE_WORDS:
        text = f"must be {_TYPE_WORDS[kind]}"
    elif kind == "greater_than":
        text = f"must be greater than {_num(ctx['gt'])}"
    elif kind == "greater_than_equal":
        text = f"must be {_num(ctx['ge'])} or more"
    elif kind == "less_than":
        text = f"must be less than {_num(ctx['lt'])}"
    elif kind == "less_than_equal":
        text = f"must be {_num(ctx['le'])} or less"
    elif kind == "literal_error":
        text = f"must be one of {ctx['expected']}"
    elif kind == "enum":
        text = f"must be one of {ctx['expected']}"
    elif kind == "too_short":
        text = f"needs at least {ctx['min_length']} item(s)"
    elif kind == "too_long":
        text = f"takes at most {ctx['max_length']} item(s)"
    elif kind == "string_pattern_mismatch":
        text = f"must match {ctx['pattern']}"
    elif kind == "missing":
        return "missing: required"
    elif kind in ("value_error", "assertion_error"):
        text = str(ctx.get("error", error["msg"]))
    else:
        text = error["msg"][0].lower() + error["msg"][1:]
    return f"{text}, got {got!r}"


def _known(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """Field names of the (nested) model at ``loc`` (for an unknown-field message)."""
    current: Any = model
    for part in loc:
        fields = getattr(current, "model_fields", None)
        if fields is None or not isinstance(part, str) or part not in fields:
            break
        annotation = fields[part].annotation
        args = getattr(annotation, "__args__", ()) or ()
        nxt = next((a for a in (annotation, *args)
                    if isinstance(a, type) and issubclass(a, BaseModel)), None)
        if nxt is None:
            break
        current = nxt
    return list(getattr(current, "model_fields", {}))


def _data_path(loc: tuple[Any, ...], data: Any) -> tuple[Any, ...]:
    """``loc`` without pydantic's union-member tags: only the keys and indices that walk
    the input data (a tag such as ``bool`` or ``literal['off']`` names no field)."""
    path: list[Any] = []
    node = data
    for i, part in enumerate(loc):
        later = loc[i + 1] if i + 1 < len(loc) else None
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif part == "[key]" or not isinstance(node, dict | list):
            continue
        elif isinstance(node, dict) and isinstance(part, str) and (
                not part.isidentifier() or part[:1].isupper() or later in node
                or part in [v for v in node.values() if isinstance(v, str)]):
            continue  # a union member's tag (a type's name, or a discriminator's value)
        path.append(part)
    return tuple(path)


def first_error(model: type[BaseModel], exc: ValidationError, where: str = "",
                data: Any = None) -> ParamError:
    """The first problem of a validation as a :class:`ParamError` naming its field."""
    error = exc.errors(include_url=False)[0]
    loc = tuple(error["loc"]) if data is None else _data_path(tuple(error["loc"]), data)
    if error["type"] in ("union_tag_invalid", "union_tag_not_found"):
        ctx = error.get("ctx") or {}
        # a callable discriminator is named after the field it reads (``kind()``)
        key = str(ctx.get("discriminator", "kind")).strip("'").removesuffix("()")
        if error["type"] == "union_tag_not_found":
            return ParamError(join(where, (*loc, key)), "missing: required")
        return ParamError(join(where, (*loc, key)),
                          f"must be one of {ctx.get('expected_tags')}, got {ctx.get('tag')!r}")
    if error["type"] == "extra_forbidden":
        known = _known(model, loc[:-1])
        return ParamError(join(where, loc), f"unknown field (known: {', '.join(known)})")
    return ParamError(join(where, loc), reason(error))


def parse(model: type[M], data: Any, where: str = "") -> M:
    """``data`` (a mapping; None means empty) validated as ``model``; :class:`ParamError`
    naming the first bad field otherwise."""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ParamError(where or "section", f"must be a mapping, got {data!r}")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise first_error(model, exc, where, data) from None
