"""The intended dependencies between the lab's parts, held against the code's imports.

Each contract names a part (modules by dotted prefix) and what it must never import
(also lazily, inside a function). The arrows allowed are those of
docs/architecture.md: the generators (``traffic``) run in bare host namespaces and
import nothing of the lab; topologies are plain data; the controller process imports
nothing of the testbed but its host layer (its netlink queue reader), and the testbed
process does not import os-ken (licences: the
testbed imports Scapy, GPL-2.0-only; os-ken is Apache-2.0, so the two stay separate
processes); the host layer knows nothing of what runs on it; the MACsec and backbone
libraries depend on the host layer, never on the run core.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("testbed", "traffic", "controllers", "topologies")

RUN_CORE = ("testbed.core", "testbed.experiments", "testbed.lab", "testbed.faults",
            "testbed.reports", "testbed.fabric.bringup")
HOST_LAYER = ("testbed.errors", "testbed.host")

#: (the part, what it must not import, why[, what of that it may import all the same])
CONTRACTS = [
    (("traffic",), ("testbed", "controllers", "topologies"),
     "the generators run in bare host namespaces"),
    (("topologies",), ("testbed", "controllers", "traffic"), "a topology is data"),
    (("controllers",), ("testbed", "traffic"), "the controller is its own process",
     HOST_LAYER),
    (HOST_LAYER, ("scapy",), "every process may use the host layer, the controller's too"),
    (("testbed",), ("os_ken", "ryu"), "the testbed process does not load os-ken"),
    (HOST_LAYER, (*RUN_CORE, "testbed.macsec", "testbed.backbone", "testbed.fabric",
                  "testbed.storage", "testbed.workloads", "testbed.cluster"),
     "the host layer knows nothing of what runs on it"),
    (("testbed.macsec", "testbed.backbone"), RUN_CORE,
     "MACsec and backbone depend on the host layer, not on the run core"),
]


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports(path: Path, name: str) -> list[set[str]]:
    """Every import statement of ``path`` (module ``name``), anywhere in it, as the set of
    absolute module names it may load (``from a import b``: ``a`` and ``a.b``)."""
    out = []
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [{alias.name} for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                base = parts[:len(parts) - node.level + 1]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            out.append({module} | {f"{module}.{alias.name}" for alias in node.names})
    return out


def within(module: str, prefixes: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def violations(root: Path, contracts=CONTRACTS) -> list[str]:
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            name = module_name(path, root)
            statements = imports(path, name)
            for part, forbidden, why, *allowed in contracts:
                if not within(name, part):
                    continue
                allowed = (*part, *(allowed[0] if allowed else ()))
                for modules in statements:
                    bad = sorted(m for m in modules
                                 if within(m, forbidden) and not within(m, allowed))
                    if bad:
                        found.append(f"{name} imports {bad[0]} ({why})")
    return found


def test_the_intended_dependencies_hold():
    assert violations(REPO) == []


@pytest.mark.parametrize("where, line", [
    ("traffic/planted.py", "from testbed import naming\n"),
    ("testbed/macsec/planted.py", "def later():\n    from testbed.core.runner import run\n"),
    ("testbed/procs_planted.py", "import os_ken.base.app_manager\n"),
    ("testbed/backbone/planted.py", "from ..experiments import base\n"),
    ("testbed/host/planted.py", "from testbed.fabric import qos\n"),
    ("controllers/planted.py", "from testbed.core import layout\n"),
    ("testbed/host/planted.py", "from scapy.all import Ether\n"),
])
def test_a_planted_forbidden_import_fails(tmp_path, where, line):
    for package in PACKAGES:
        (tmp_path / package).mkdir()
    (tmp_path / "testbed" / "macsec").mkdir()
    (tmp_path / "testbed" / "backbone").mkdir()
    (tmp_path / "testbed" / "host").mkdir()
    (tmp_path / where).write_text(line)
    assert len(violations(tmp_path)) == 1, violations(tmp_path)


def test_validating_every_shipped_scenario_loads_no_os_ken_and_draws_nothing():
    """The same contract at run time: registries answer "is this name known?" without
    importing what the name stands for (a routing mode's class imports os-ken), and
    reading a scenario loads no plotting library. In a fresh process, as ``testbed
    validate`` reads them."""
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from testbed.core import scenario\n"
        "files = sorted(Path('scenarios').glob('*.yaml')) + sorted(\n"
        "    p for p in Path('labs').glob('*/*/*.yaml') if p.name in ('scenario.yaml', "
        "'backbone.yaml'))\n"
        "assert len(files) > 20, files\n"
        "for path in files:\n"
        "    scenario.load(path)\n"
        "print(' '.join(sorted({m.split('.')[0] for m in sys.modules})))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = set(done.stdout.split())
    assert not loaded & {"os_ken", "ryu"}, "the testbed process loaded os-ken"
    assert "matplotlib" not in loaded
