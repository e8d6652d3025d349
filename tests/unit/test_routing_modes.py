"""Routing modes: one registry (controllers.routing.MODES) of strategy classes, the
built-in ones and a scenario's own, named by its dotted path and checked without
running it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from controllers.routing import MODES, RoutingMode
from controllers.schema import Controller
from topologies import plugins
from topologies.params import ParamError

REPO = Path(__file__).resolve().parents[2]


def test_every_built_in_mode_is_a_strategy_known_by_its_name():
    assert list(MODES) == ["ecmp", "adaptive", "gff", "spray"]
    for name in MODES:
        cls = MODES[name]
        assert issubclass(cls, RoutingMode) and cls.NAME == name and cls.DESCRIPTION
    assert [n for n in MODES if MODES[n].PLACES] == ["adaptive", "gff"]
    assert [n for n in MODES if MODES[n].KEEPS_PINS] == ["adaptive"]


def test_the_schema_takes_the_registry_names_or_a_dotted_class():
    assert Controller.model_validate({"mode": "gff"}).mode == "gff"
    own = "examples.modes.round_robin:RoundRobin"
    assert Controller.model_validate({"mode": own}).mode == own
    with pytest.raises(ValueError, match=r"unknown routing mode 'star' \(known: ecmp, "
                                         r"adaptive, gff, spray, or package.module:Class\)"):
        Controller.model_validate({"mode": "star"})


def test_a_mode_of_ones_own_resolves_under_its_name():
    with plugins.allowed():
        cls = MODES.resolve("examples.modes.round_robin:RoundRobin", "controller.mode")
    try:
        assert cls.NAME == "round-robin" and MODES["round-robin"] is cls
        assert cls.PLACES and not cls.KEEPS_PINS
    finally:
        MODES.forget("round-robin")
    with pytest.raises(ParamError, match="is not a controllers.routing.RoutingMode"):
        with plugins.allowed():
            MODES.resolve("examples.apps.pin_flow:PinFlow", "controller.mode")


def scenario(tmp_path: Path, mode: str) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump({
        "name": "own-mode", "duration_s": 2,
        "topology": {"planes": 1, "nodes": 2, "leaves_per_plane": 2, "spines_per_plane": 2},
        "controller": {"mode": mode}, "agents": {"enabled": False}}))
    return path


def validate(path: Path) -> subprocess.CompletedProcess:
    probe = ("import sys; from testbed.core import scenario; scenario.validate(sys.argv[1]);"
             "print(sorted(m for m in sys.modules if m.startswith(('examples.modes', "
             "'os_ken'))))")
    return subprocess.run([sys.executable, "-c", probe, str(path)], cwd=REPO,
                          capture_output=True, text=True)


def test_validation_checks_a_mode_of_ones_own_without_importing_it(tmp_path):
    done = validate(scenario(tmp_path, "examples.modes.round_robin:RoundRobin"))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"  # neither the mode's module nor os-ken loaded
    cli = [sys.executable, "-m", "testbed.core.cli", "validate"]
    bad = subprocess.run([*cli, str(scenario(tmp_path, "examples.modes.round_robin:Nope"))],
                         cwd=REPO, capture_output=True, text=True)
    assert bad.returncode == 2
    line, = bad.stderr.strip().splitlines()
    assert line.endswith("controller.mode: examples/modes/round_robin.py defines no 'Nope' "
                         "at its top level"), line
    bad = subprocess.run([*cli, str(scenario(tmp_path, "star"))], cwd=REPO,
                         capture_output=True, text=True)
    assert bad.returncode == 2 and "controller.mode: unknown routing mode 'star'" in bad.stderr
