"""The experiment registry, the one schema, and the layering of the kinds."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import yaml

from testbed import experiments
from testbed.core.scenario import load, parse
from testbed.core.schema import scenario_schema
from testbed.errors import ConfigError
from testbed.experiments.base import Experiment

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted([*REPO.glob("scenarios/*.yaml"), *REPO.glob("examples/*.yaml")])


def test_every_kind_is_an_experiment_with_its_sections():
    kinds = experiments.all_kinds()
    assert {"fabric", "macsec", "backbone"} <= set(kinds)
    for kind, cls in kinds.items():
        assert issubclass(cls, Experiment) and cls.KIND == kind and cls.SECTIONS
        if kind in experiments.BUILT_IN_SECTIONS:  # what is found without importing it
            assert experiments.BUILT_IN_SECTIONS[kind] == tuple(cls.SECTIONS), kind


def test_a_scenarios_kind_is_found_without_importing_the_other_kinds():
    """A fabric scenario read in a fresh process loads the fabric kind alone (each other
    kind's run code loads netlink, MACsec or networkx: time at every CLI start)."""
    code = ("import sys\n"
            "from testbed.core.scenario import load\n"
            "load('scenarios/agents-vs-training.yaml')\n"
            "print(' '.join(m for m in sys.modules if m.startswith('testbed.experiments.')))")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = {m.split(".")[2] for m in done.stdout.split()}
    assert "fabric" in loaded and not loaded & {"macsec", "backbone", "storage"}, loaded


@pytest.mark.parametrize("data, kind", [
    ({"name": "a"}, "fabric"),
    ({"name": "a", "topology": {}}, "fabric"),
    ({"name": "a", "macsec": {}}, "macsec"),
    ({"name": "a", "backbone": {}}, "backbone"),
    ({"name": "a", "kind": "macsec"}, "macsec"),
])
def test_the_kind_follows_from_the_sections(data, kind):
    assert experiments.kind_of(data) == kind


@pytest.mark.parametrize("data, field, words", [
    ({"name": "a", "macsec": {}, "backbone": {}}, "backbone", "one experiment"),
    ({"name": "a", "kind": "nosuch"}, "kind", "unknown experiment kind"),
    ({"name": "a", "kind": "json.decoder"}, "kind", "defines no EXPERIMENT"),
    ({"name": "a", "kind": "no.such.module"}, "kind", "no module 'no'"),
    ({"name": "a", "macsec": {}, "topology": {}}, "topology", "not used by a macsec"),
    ({"name": "a", "colour": 1}, "colour", "unknown field"),
    ({"name": "a", "description": ["x"]}, "description", "must be a string"),
    ({"name": "a", "seed": -1}, "seed", "0 or more"),
    ({"name": "a", "seeds": [1, 1]}, "seeds", "repeat"),
    ({"name": "a", "duration_s": True}, "duration_s", "must be a number"),
])
def test_bad_head_and_kind_are_one_line_naming_the_field(data, field, words, plugins_load):
    with pytest.raises(ConfigError) as err:
        parse(data)
    assert err.value.field == field and words in err.value.reason
    assert "\n" not in str(err.value)


def test_a_plugin_kind_from_its_dotted_path_validates(plugins_load):
    sc = load(REPO / "examples" / "pingmesh.yaml")
    assert sc.kind == "examples.kinds.pingmesh"
    assert [v.name for v in sc.variants] == ["mesh"]
    with pytest.raises(ConfigError) as err:
        parse({"name": "p", "kind": "examples.kinds.pingmesh", "pingmesh": {"hosts": 99}})
    assert err.value.field == "pingmesh.hosts"


def test_schema_is_valid_json_schema_and_every_shipped_scenario_passes_it():
    schema = scenario_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    assert SHIPPED
    for path in SHIPPED:
        errors = list(validator.iter_errors(yaml.safe_load(path.read_text())))
        assert not errors, (path.name, [e.message for e in errors[:3]])


@pytest.mark.parametrize("bad", [
    {"name": "x", "colour": 1},
    {"name": "x", "controller": {"mode": "magic"}},
    {"name": "x", "macsec": {"suite": "des"}},
    {"name": "x", "backbone": {"probe_rate_pps": 1}},
    {"name": "x", "training": {"payload": 1}},
])
def test_schema_refuses_what_validate_refuses(bad):
    validator = jsonschema.Draft202012Validator(scenario_schema())
    assert list(validator.iter_errors(bad))
    with pytest.raises(ConfigError):
        parse(bad)


def test_schema_command_prints_the_schema():
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "schema"], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 0
    assert json.loads(done.stdout)["properties"]["name"]["type"] == "string"


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


@pytest.mark.parametrize("library", ["testbed/macsec", "testbed/backbone", "topologies"])
def test_libraries_import_nothing_of_the_runner(library):
    runner_side = ("testbed.core.runner", "testbed.experiments", "testbed.core.scenario",
                   "testbed.reports.report", "testbed.core.cli", "testbed.workloads.generators")
    for path in (REPO / library).rglob("*.py"):
        bad = [m for m in _imports(path) if m.startswith(runner_side)]
        assert not bad, (path, bad)


def test_the_runner_names_no_kind():
    text = (REPO / "testbed" / "core" / "runner.py").read_text()
    for word in ("fabric", "macsec", "backbone", "FabricExperiment"):
        assert f'"{word}"' not in text and f"import {word}" not in text


def test_lab_support_is_the_kinds_own():
    """``testbed up`` asks the kind for its lab (no list of kinds in the lab's code)."""
    labs = {kind: cls for kind, cls in experiments.all_kinds().items() if cls.LAB}
    assert set(labs) == {"fabric", "backbone"}
    for kind, cls in labs.items():
        assert cls.lab_class().KIND == kind
    assert experiments.get("fabric").LAB_TRAFFIC and not experiments.get("backbone").LAB_TRAFFIC
    with pytest.raises(ConfigError) as err:
        experiments.get("macsec").lab_class()
    assert err.value.reason == ("a macsec scenario cannot be kept up as a lab (fabric and "
                                "backbone scenarios can)")
    source = "".join((REPO / "testbed" / "lab" / f"{name}.py").read_text() for name in (
        "commands", "up", "attach", "client", "supervisor"))
    assert 'kind == "fabric"' not in source and 'kind != "fabric"' not in source
