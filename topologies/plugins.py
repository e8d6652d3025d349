"""Code a scenario names: plug-in builders, experiment kinds, controller apps, fault kinds.

A scenario can name code of its own by its module's dotted path (``kind:
examples.kinds.pingmesh``, ``builder: examples.builders.ring:Ring``, ``apps:
["examples.apps.pin_flow:PinFlow"]``, ``action: mypackage.faults:Blackhole``). Such a
scenario is code that runs as root, like a Makefile. Validation runs none of it:
:func:`check` finds the module on the import path (and in the current folder, where
``testbed run`` finds it too) without executing anything, parses its source and checks
that it defines the name it is asked for at its top level. Only a process that runs or
brings up a lab calls :func:`allow`; until then :func:`load` refuses with
:class:`NotLoaded`, so nothing a scenario names can be imported by a validation.

>>> check("examples.builders.ring:Ring", "topology.builder").name
'ring.py'
>>> def reason(reference):
...     try:
...         check(reference, "topology.builder")
...     except ParamError as exc:
...         return exc.reason
>>> reason("examples.builders.ring:nope")
"examples/builders/ring.py defines no 'nope' at its top level"
>>> reason("builtins:getattr")
"'builtins' is not a Python source file (a plug-in is a .py module)"
"""

from __future__ import annotations

import ast
import importlib
import importlib.machinery
import os
import re
import sys
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType

from topologies.params import ParamError, clip

#: ``package.module`` or ``package.module:name``: what a plug-in reference looks like
REFERENCE = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*(:[A-Za-z_]\w*)?")
MAX_SOURCE_BYTES = 4 << 20  # a plug-in module larger than this is not read

_allowed = False


class NotLoaded(Exception):  # noqa: N818 (not an error of the input: a stop)
    """A plug-in was about to be imported in a process that runs no scenario code (a
    validation): what depends on it cannot be checked there. Deliberately not a
    ParamError, so that no handler of bad input turns it into one."""

    def __init__(self, where: str, module: str, path: Path):
        super().__init__(f"{where}: plug-in {module} ({relative(path)}) is not loaded: "
                         "validation runs no code")
        self.where, self.module, self.path = where, module, path


#: folders of the scenario files read so far: a plug-in may live beside its scenario
#: (a student's app in the student's folder), found after the import path and the
#: current folder
_FOLDERS: list[str] = []


def add_folder(folder: Path | str) -> None:
    """Let plug-ins be found in ``folder`` too (the folder of a scenario file)."""
    folder = str(Path(folder).resolve())
    if folder not in _FOLDERS:
        _FOLDERS.append(folder)


def folders() -> list[str]:
    """The folders :func:`add_folder` added, in order (for the controller's process)."""
    return list(_FOLDERS)


def allow() -> None:
    """This process runs scenarios (``testbed run``, ``testbed up``): plug-ins may load."""
    global _allowed
    _allowed = True


@contextmanager
def allowed():
    """Plug-ins may load inside the block (tests, benches)."""
    global _allowed
    before, _allowed = _allowed, True
    try:
        yield
    finally:
        _allowed = before


def may_load() -> bool:
    return _allowed


def _search_path() -> list[str]:
    here = os.getcwd()
    out = [*sys.path, here] if here not in sys.path else list(sys.path)
    return out + [f for f in _FOLDERS if f not in out]


def locate(module: str, where: str) -> Path:
    """The source file of ``module``, found as the import system would find it, but
    without importing anything (a package's ``__init__`` is not run to find a module
    inside it); ParamError when there is none or it is not Python source."""
    if not REFERENCE.fullmatch(module) or ":" in module:
        raise ParamError(where, f"{clip(str(module), 60)!r} is not a module's dotted path")
    parts = module.split(".")
    search: list[str] | None = _search_path()
    spec = None
    for i in range(len(parts)):
        name = ".".join(parts[:i + 1])
        if i == 0 and (importlib.machinery.BuiltinImporter.find_spec(name) is not None
                       or importlib.machinery.FrozenImporter.find_spec(name) is not None):
            raise ParamError(where, f"{name!r} is not a Python source file (a plug-in is a "
                                    ".py module)")
        spec = importlib.machinery.PathFinder.find_spec(name, search)
        if spec is None:
            raise ParamError(where, f"no module {name!r} on the import path, in "
                                    f"{os.getcwd()} or beside the scenario")
        if i < len(parts) - 1:
            search = list(spec.submodule_search_locations or [])
            if not search:
                raise ParamError(where, f"{name!r} is a module, not a package")
    origin = spec.origin if spec is not None else None
    if spec is not None and spec.submodule_search_locations and origin in (None, "namespace"):
        raise ParamError(where, f"{module!r} is a folder without __init__.py, not a module")
    if not origin or not origin.endswith(".py"):
        raise ParamError(where, f"{module!r} is not a Python source file (a plug-in is a "
                                ".py module)")
    return Path(origin)


def top_level_names(path: Path, where: str) -> set[str]:
    """The names a module's source binds at its top level (definitions, assignments,
    imports), read from its syntax tree; a syntax error is a ParamError."""
    try:
        if path.stat().st_size > MAX_SOURCE_BYTES:
            raise ParamError(where, f"{relative(path)} is over {MAX_SOURCE_BYTES >> 20} MB")
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except SyntaxError as exc:
        raise ParamError(where, f"{relative(path)}, line {exc.lineno}: {exc.msg}") from None
    except (OSError, ValueError) as exc:
        raise ParamError(where, f"{relative(path)} cannot be read: {exc}") from None
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, ast.AnnAssign | ast.AugAssign) and isinstance(node.target,
                                                                            ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return names


def check(reference: str, where: str, default: str | None = None) -> Path:
    """Statically check ``package.module[:name]`` (``name`` defaults to ``default``):
    the module's source file, which binds the name at its top level. Runs no code."""
    if not isinstance(reference, str) or not REFERENCE.fullmatch(reference):
        raise ParamError(where, f"{clip(str(reference), 60)!r} is not package.module or "
                                "package.module:name")
    module, _, name = reference.partition(":")
    path = locate(module, where)
    names = top_level_names(path, where)
    name = name or default or ""
    if name and name not in names:
        raise ParamError(where, f"{relative(path)} defines no {name!r} at its top level")
    return path


def load(module: str, where: str) -> ModuleType:
    """Import a plug-in module (from the import path or the current folder); NotLoaded
    in a process that has not called :func:`allow`; one-line ParamError when it cannot
    be imported."""
    path = locate(module, where)  # what validation checks, checked here too
    if not _allowed:
        raise NotLoaded(where, module, path)
    on_path()
    try:
        return importlib.import_module(module)
    except SyntaxError as exc:
        raise ParamError(where, f"cannot import {module!r}: {exc.msg} "
                                f"({exc.filename}, line {exc.lineno})") from None
    except ImportError as exc:
        raise ParamError(where, f"cannot import {module!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 (the plug-in's own code failed: one line)
        raise ParamError(where, f"importing {module!r} failed: "
                                f"{type(exc).__name__}: {clip(str(exc), 60)}") from None


def on_path() -> None:
    """Make plug-ins importable where :func:`locate` finds them: the current folder and
    the scenarios' folders go on ``sys.path`` (after what is there)."""
    for folder in [os.getcwd(), *_FOLDERS]:
        if folder not in sys.path:
            sys.path.append(folder)


def relative(path: Path) -> str:
    """``path`` relative to the current folder where it is inside it."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)



#: ``package.module:Name``: a class of one's own named where a registry's name would be
DOTTED = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*$")
#: ``package.module`` (its default class) or ``package.module:Name``
MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)+(:[A-Za-z_]\w*)?$")


class Registry(Mapping):
    """The extensions of one axis (experiment kinds, fault kinds, workload kinds), one
    shape for all: classes of one base class, each known by its name (the class
    attribute ``key``, ``NAME`` unless said). The built-in ones register themselves
    (:meth:`register`, usable as a class decorator) or are named by where they live
    (:meth:`add`, imported when first asked for); a scenario names one of its own by
    ``package.module:Class`` (``package.module`` alone: its ``default`` attribute),
    which :meth:`resolve` loads (:func:`load`: refused in a validation) and registers
    under its name, which the records then use.

    >>> class Shape:
    ...     NAME = ""
    >>> shapes = Registry("shape", Shape)
    >>> @shapes.register
    ... class Ring(Shape):
    ...     NAME = "ring"
    >>> shapes.resolve("ring", "shape") is Ring, "ring" in shapes, list(shapes)
    (True, True, ['ring'])
    >>> try:
    ...     shapes.resolve("star", "topology.shape")
    ... except ParamError as exc:
    ...     print(exc)
    topology.shape: unknown shape 'star' (known: ring, or package.module:Class)
    """

    def __init__(self, axis: str, base: type, *, key: str = "NAME",
                 default: str | None = None) -> None:
        self.axis, self.base, self.key, self.default = axis, base, key, default
        self._entries: dict[str, type | str] = {}
        self.pattern = MODULE if default else DOTTED
        self.form = "a module's dotted path" if default else "package.module:Class"

    def register(self, cls: type) -> type:
        """Make ``cls`` known by its name; returns it (a class decorator)."""
        if not getattr(cls, self.key, ""):
            raise TypeError(f"{cls.__qualname__} has no {self.key}")
        self._entries[getattr(cls, self.key)] = cls
        return cls

    def add(self, name: str, where: str) -> None:
        """Make ``name`` known as the class at ``package.module:Class`` (or the module's
        ``default``), imported when it is first asked for (a built-in one, or a test's)."""
        self._entries[name] = where

    def resolve(self, name: object, where: str) -> type:
        """The class registered as ``name``, or the class a reference names (loaded
        and registered); one-line ParamError otherwise."""
        if isinstance(name, str) and name in self._entries:
            return self[name]
        if not isinstance(name, str) or not self.pattern.fullmatch(name):
            raise ParamError(where, f"unknown {self.axis} {clip(str(name), 60)!r} (known: "
                                    f"{', '.join(self._entries)}, or {self.form})")
        module, _, attr = name.partition(":")
        cls = self._check(name, getattr(load(module, where), attr or self.default, None),
                          where)
        if self._entries.get(getattr(cls, self.key), cls) is not cls:
            raise ParamError(where, f"{name} is named {getattr(cls, self.key)!r}, which "
                                    f"another {self.axis} has")
        return self.register(cls)

    def _check(self, name: str, cls: object, where: str) -> type:
        base = f"{self.base.__module__}.{self.base.__qualname__}"
        if not (isinstance(cls, type) and issubclass(cls, self.base)):
            if self.default and ":" not in name:
                raise ParamError(where, f"{name!r} defines no {self.default} (a subclass "
                                        f"of {base})")
            raise ParamError(where, f"{name} is not a {base}")
        if not getattr(cls, self.key, ""):
            raise ParamError(where, f"{name} has no {self.key}")
        return cls

    def is_reference(self, name: object) -> bool:
        """``name`` names a class of one's own (not a registered name)."""
        return isinstance(name, str) and name not in self._entries \
            and self.pattern.fullmatch(name) is not None

    # the registered classes by name, a read-only mapping
    def __iter__(self):
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, name: object) -> bool:
        """``name`` is registered; nothing is imported to answer (Mapping's own test
        would load the class: a routing mode's check in the testbed process would load
        os-ken)."""
        return name in self._entries

    def __getitem__(self, name: str) -> type:
        entry = self._entries[name]
        if isinstance(entry, str):  # a built-in one, imported now
            module, _, attr = entry.partition(":")
            cls = getattr(importlib.import_module(module), attr or self.default or "", None)
            entry = self._entries[name] = self._check(entry, cls, name)
        return entry

    def forget(self, name: str) -> type | str | None:
        """Drop ``name`` (a test's own class, after the test); what it was."""
        return self._entries.pop(name, None)
