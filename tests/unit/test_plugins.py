"""Validation runs no code the scenario names; run and up load plug-ins first.

Every plug-in below writes a marker file when its module is imported (its package's
``__init__`` too) and another when its function is called; ``testbed validate`` is run as
a user runs it, in a fresh process whose current folder holds the plug-in package.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.errors import ConfigError
from topologies import plugins

REPO = Path(__file__).resolve().parents[2]

PLUGIN = """
from pathlib import Path
Path(__file__).with_name("IMPORTED-" + __name__).write_text("ran")

def build(prefix, **params):
    Path(__file__).with_name("CALLED").write_text("ran")

class Boom:
    pass

class App:
    pass

EXPERIMENT = None
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    pkg = tmp_path / "evil"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(PLUGIN)
    (pkg / "mod.py").write_text(PLUGIN)
    (pkg / "broken.py").write_text("def f(:\n")
    (tmp_path / "tmp").mkdir()
    return tmp_path


def validate(folder: Path, scenario: dict, *, fresh: bool = False
             ) -> subprocess.CompletedProcess:
    """``testbed validate`` from ``folder`` (where the plug-in package is): in this
    process, or with ``fresh`` in a new one, as a user runs it."""
    path = folder / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    if fresh:
        env = {**os.environ, "TMPDIR": str(folder / "tmp"), "PYTHONPATH": str(REPO)}
        return subprocess.run([sys.executable, "-m", "testbed.core.cli", "validate", str(path)],
                              cwd=folder, env=env, capture_output=True, text=True,
                              timeout=60)
    import contextlib
    import io
    import tempfile

    from testbed.core.cli import main

    out, err = io.StringIO(), io.StringIO()
    here, tmp = os.getcwd(), tempfile.tempdir
    os.chdir(folder)
    tempfile.tempdir = str(folder / "tmp")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(["validate", str(path)])
    finally:
        os.chdir(here)
        tempfile.tempdir = tmp
    return subprocess.CompletedProcess([], code, out.getvalue(), err.getvalue())


def markers(folder: Path) -> list[str]:
    return sorted(p.name for p in (folder / "evil").iterdir()
                  if p.name.startswith(("IMPORTED", "CALLED"))) + \
        sorted(p.name for p in (folder / "tmp").iterdir())


NAMING = [
    {"name": "k", "kind": "evil.mod"},
    {"name": "b", "agents": {"enabled": False}, "topology": {"builder": "evil.mod:build"}},
    {"name": "v", "agents": {"enabled": False},
     "variants": [{"name": "x", "topology": {"builder": "evil.mod:build"}}]},
    {"name": "a", "agents": {"enabled": False}, "controller": {"apps": ["evil.mod:App"]}},
    {"name": "f", "agents": {"enabled": False},
     "faults": [{"at_s": 1, "action": "evil.mod:Boom", "target": "p0l0-p0s0"}]},
    {"name": "t", "topology": {"builder": "tempfile:mkdtemp"}},
]


@pytest.mark.parametrize("scenario", NAMING, ids=[s["name"] for s in NAMING])
def test_validate_imports_and_calls_nothing_the_scenario_names(folder, scenario):
    # the last one as a user runs it: a fresh process, the plug-in in the current folder
    done = validate(folder, scenario, fresh=scenario is NAMING[-1])
    assert done.returncode == 0, done.stderr
    assert "not loaded" in done.stdout, done.stdout
    assert markers(folder) == []


BAD = [
    ({"topology": {"builder": "../../etc:x"}}, "topology.builder"),
    ({"topology": {"builder": ":x"}}, "topology.builder"),
    ({"topology": {"builder": "builtins:getattr"}}, "not a Python source file"),
    ({"topology": {"builder": "evil.mod:missing"}}, "defines no 'missing'"),
    ({"topology": {"builder": "evil.broken:f"}}, "line 1"),
    ({"topology": {"builder": "no_such_pkg.mod:f"}}, "no module 'no_such_pkg'"),
    ({"topology": {"builder": "evil.mod.deeper:f"}}, "is a module, not a package"),
    ({"kind": "evil.nothere"}, "no module 'evil.nothere'"),
    ({"kind": "json.decoder"}, "defines no 'EXPERIMENT'"),
    ({"kind": "os.path"}, "not a Python source file"),
    ({"controller": {"apps": ["evil.mod:Missing"]}}, "controller.apps[0]"),
    ({"variants": [{"name": "x", "faults": [{"at_s": 1, "action": "evil.broken:X",
                                             "target": "p0l0-p0s0"}]}]},
     "variants[0].faults[0].action"),
]


@pytest.mark.parametrize("scenario,expected", BAD, ids=[str(i) for i in range(len(BAD))])
def test_a_bad_plugin_reference_is_one_line_and_exit_2(folder, scenario, expected):
    done = validate(folder, {"name": "bad", **scenario})
    assert done.returncode == 2, (done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], done.stderr
    assert markers(folder) == []


def test_a_scenario_without_plugins_is_validated_whole(folder):
    done = validate(folder, {"name": "plain", "agents": {"enabled": False},
                             "topology": {"nodes": 4}})
    assert done.returncode == 0 and "valid, 1 variants" in done.stdout, done


def test_a_validating_process_refuses_to_import(folder, monkeypatch):
    monkeypatch.chdir(folder)
    with pytest.raises(plugins.NotLoaded, match="validation runs no code"):
        plugins.load("evil.mod", "kind")
    assert markers(folder) == []


def test_a_run_loads_plugins_and_reports_a_failing_one_in_one_line(folder, monkeypatch):
    from testbed.core.scenario import parse

    (folder / "evil" / "crash.py").write_text("raise RuntimeError('boom' * 50)\n")
    monkeypatch.chdir(folder)
    monkeypatch.setattr(sys, "path", [*sys.path])
    monkeypatch.setattr(sys, "modules", dict(sys.modules))  # its evil package goes after
    with plugins.allowed(), pytest.raises(ConfigError) as exc:
        parse({"name": "c", "topology": {"builder": "evil.crash:build"}})
    assert exc.value.field == "topology.builder"
    assert "RuntimeError" in str(exc.value) and len(str(exc.value)) < 200
    assert not plugins.may_load()  # only inside the block


def test_the_readme_says_a_scenario_naming_plugins_is_code():
    text = " ".join((REPO / "README.md").read_text().split())
    assert "A scenario that names plug-ins is code." in text
    assert "`testbed validate` runs none of it" in text


def test_a_plugin_beside_its_scenario_is_found_from_any_folder(tmp_path):
    """A student's app lives in the student's folder, beside the scenario naming it:
    validate finds it there (statically) from wherever testbed runs; a scenario in
    another folder does not see it."""
    import os
    import shutil
    import subprocess
    import sys

    mine = tmp_path / "my-labs"
    mine.mkdir()
    shutil.copy(REPO / "labs" / "lab03_hashing" / "starter" / "placement.py",
                mine / "student_placement.py")
    text = (REPO / "labs" / "lab03_hashing" / "starter" / "scenario.yaml").read_text()
    (mine / "lab03.yaml").write_text(
        text.replace("labs.lab03_hashing.starter.placement", "student_placement"))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "lab03.yaml").write_text((mine / "lab03.yaml").read_text())
    env = {"PYTHONPATH": str(REPO)}

    def validate(path):
        return subprocess.run([sys.executable, "-m", "testbed.core.cli", "validate", str(path)],
                              cwd=tmp_path, capture_output=True, text=True, timeout=60,
                              env={**os.environ, **env})

    done = validate(mine / "lab03.yaml")
    assert done.returncode == 0, done.stderr
    assert "student_placement" in done.stdout
    done = validate(elsewhere / "lab03.yaml")
    assert done.returncode == 2 and "no module 'student_placement'" in done.stderr
