"""A results folder checked against :data:`testbed.core.records.RECORDS` (a file no
entry describes, a described field missing or of another type, is a finding), and
the results reference page the docs build renders from the same table.

>>> from testbed.core.records import RECORDS
>>> check_records(RECORDS["CHAINS"], [{"chain": 1}])[:1]
['chains.jsonl: line 1: template missing']
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from pathlib import Path

from testbed.core import layout
from testbed.core.record_fields import Record
from testbed.core.records import RECORDS, describing

# -- checking a record against its fields ----------------------------------------------
_TYPES = {"int": (int,), "float": (int, float), "str": (str,), "bool": (bool,),
          "list": (list,), "object": (dict,), "null": (type(None),), "any": (object,)}


def type_ok(value: object, type_: str) -> bool:
    """``value`` has JSON type ``type_`` (``float|null``: a number or null).

    >>> type_ok(True, "int"), type_ok(3, "float"), type_ok(None, "str|null")
    (False, True, True)
    """
    for t in type_.split("|"):
        if isinstance(value, bool) and t not in ("bool", "any"):
            continue
        if isinstance(value, _TYPES[t]):
            return True
    return False


def _split(path: str) -> list[str]:
    return path.replace("[]", ".[]").split(".")


def _parents(doc: object, steps: list[str]) -> Iterator[object]:
    """The containers that should hold the path's last key."""
    if not steps:
        yield doc
        return
    head, rest = steps[0], steps[1:]
    if head == "[]":
        if isinstance(doc, list):
            for item in doc:
                yield from _parents(item, rest)
    elif isinstance(doc, dict) and head in doc:
        yield from _parents(doc[head], rest)


def check_records(record: Record, docs: Iterable[object], where: str = "") -> list[str]:
    """What ``docs`` (a JSON document, or the lines of a JSON-lines file) get wrong
    against ``record``'s fields: one line a problem."""
    label = where or record.pattern
    problems: list[str] = []
    top = {_split(f.name)[0] for f in record.fields}
    for i, doc in enumerate(docs, 1):
        at = f"{label}: line {i}: " if record.format == "jsonl" else f"{label}: "
        if not isinstance(doc, dict):
            problems.append(f"{at}not a JSON object")
            continue
        for f in record.fields:
            steps = _split(f.name)
            for parent in _parents(doc, steps[:-1]):
                if not isinstance(parent, dict):
                    continue
                if steps[-1] not in parent:
                    if f.required:
                        problems.append(f"{at}{f.name} missing")
                elif not type_ok(parent[steps[-1]], f.type):
                    problems.append(f"{at}{f.name} is "
                                    f"{type(parent[steps[-1]]).__name__}, not {f.type}")
        if record.closed:
            problems += [f"{at}{k} is not described" for k in doc if k not in top]
        if len(problems) > 20:
            break
    return problems


def read_docs(path: Path, fmt: str) -> list[object]:
    """The JSON values of a record file (an empty file holds none)."""
    text = path.read_text()
    if not text.strip():
        return []
    if fmt == "jsonl":
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    return [json.loads(text)]


def _files(folder: Path, where: str) -> Iterator[tuple[Path, str]]:
    for path in sorted(folder.iterdir()):
        if where == "run" and path.name == layout.VARIANTS:
            continue
        yield path, where


def check_folder(root: Path) -> list[str]:
    """What a results folder gets wrong against :data:`RECORDS`: files nobody describes,
    described fields missing or of another type. Empty when all is well."""
    summary = json.loads((root / layout.SUMMARY).read_text())
    folders = [(root, "run")]
    for run in summary.get("runs", []):
        folders += [(d, "variant") for d in layout.run_dirs(run, root) if d.is_dir()]
    problems = []
    for folder, where in folders:
        for path, kind in _files(folder, where):
            key = describing(path.name, kind)
            rel = path.relative_to(root)
            if key is None:
                problems.append(f"{rel}: no entry in testbed.core.records describes it")
                continue
            rec = RECORDS[key]
            if rec.format in ("json", "jsonl"):
                try:
                    docs = read_docs(path, rec.format)
                except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                    problems.append(f"{rel}: not {rec.format}: {exc}")
                    continue
                problems += check_records(rec, docs, str(rel))
    return problems


# -- the reference page -----------------------------------------------------------------
WHERE = {"run": "The results folder", "variant": "A variant's folder",
         "lab": "A lab's folder (testbed up)"}

INTRO = """# Results reference

Generated from `testbed.core.records` when the docs are built: every file of a results
folder, what writes it, and the fields of each record with their JSON type and unit.
A test checks real results folders against this table, so a file or a field the code
writes is described here or the test fails. Times marked *s (Unix time)* are seconds
since the epoch (floats); the PFC agent's times count from its own start. `|null` means
the value may be `null`; a name like `runs[].agents.latency_ms.p99` is a key inside a
list's items. *JSON lines* files hold one JSON object a line.

```
OUT/summary.json, manifest.json, report.md, *.png
OUT/variants/NAME/            one variant (one seed)
OUT/variants/NAME/seedN/      one variant and seed, when the scenario has several seeds
```

To load these files into pandas, see [Analysing results](../analysis.md).
"""


def _cell(text: str) -> str:
    return text.replace("``", "`").replace("|", "\\|").replace("\n", " ")


def reference_page() -> str:
    """The results reference, as Markdown."""
    formats = {"jsonl": "JSON lines", "json": "JSON", "png": "PNG image", "log": "text log",
               "text": "text",
               "markdown": "Markdown", "pcap": "pcap", "folder": "folder"}
    lines = [INTRO]
    for where, title in WHERE.items():
        lines += [f"## {title}", ""]
        for rec in (r for r in RECORDS.values() if r.where == where):
            lines += [f"### `{rec.pattern}`", "",
                      f"{_cell(rec.meaning[0].upper() + rec.meaning[1:])}. "
                      f"{formats[rec.format]}, written by `{rec.writer}`.", ""]
            if rec.fields:
                lines += ["| field | type | unit | meaning |", "|---|---|---|---|"]
                lines += [f"| `{f.name}` | {_cell(f.type)} | {_cell(f.unit)} | "
                          f"{_cell(f.meaning)}{'' if f.required else ' (optional)'} |"
                          for f in rec.fields]
                lines.append("")
                if not rec.closed and rec.format in ("json", "jsonl"):
                    lines += ["Other keys may appear; those above are always there "
                              "(unless marked optional).", ""]
    return "\n".join(lines)
