"""Hostile and malformed scenario files: every one gets exit 2 and one short line.

Bounded input (a document's size with its aliases expanded, nesting, UTF-8, duplicate
keys), finite numbers, fault times within the run, sections of the wrong type, and
names that would reach a command line (backbone PoPs and regions).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.core.cli import main

REPO = Path(__file__).resolve().parents[2]
BASE = "name: h\nagents: {enabled: false}\n"


def laughs(levels: int, width: int = 9) -> str:
    text = 'l0: &l0 ["lol"]\n'
    for i in range(1, levels + 1):
        text += f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]\n"
    return text


def backbone(**change) -> str:
    doc = yaml.safe_load((REPO / "scenarios" / "cross-region-writes.yaml").read_text())
    for key, value in change.items():
        section, index, field = key.split("__")
        doc["backbone"][section][int(index)][field] = value
    return yaml.safe_dump(doc)


CASES = {
    # bounded input
    "billion laughs": ("name: h\n" + laughs(9) + "description: *l9\n", "aliases expanded"),
    "laughs in a name": (laughs(4) + "name: *l4\n", "name"),
    "deep list": ("name: h\ntopology: " + "[" * 3000 + "]" * 3000 + "\n", "nested deeper"),
    "deep mapping": ("name: h\ntopology: " + "{a: " * 50 + "1" + "}" * 50 + "\n",
                     "nested deeper"),
    "alias into itself": ("name: h\ntopology: &a {x: *a}\n", "refers to the node"),
    "not UTF-8": (b"name: h\ndescription: \xff\xfe\n", "not UTF-8"),
    "duplicate key": ("name: h\nseed: 1\nseed: 2\n", "duplicate key 'seed'"),
    "duplicate nested key": (BASE + "topology: {nodes: 4, nodes: 8}\n", "duplicate key"),
    "a huge name": ('name: "' + "x" * 100_000 + '"\n', "name"),
    "a name with a newline": ('name: "h\\n"\n', "name"),
    # numbers
    "infinite duration": ("name: h\nduration_s: .inf\n", "finite"),
    "NaN seed of a fault": (BASE + "faults: [{at_s: .nan, action: link_down, "
                                   "target: p0l0-p0s0}]\n", "faults[0].at_s"),
    "infinite fault time": (BASE + "faults: [{at_s: .inf, action: link_down, "
                                   "target: p0l0-p0s0}]\n", "faults[0].at_s"),
    "fault after the run": (BASE + "duration_s: 10\nfaults: [{at_s: 10, action: link_down, "
                                   "target: p0l0-p0s0}]\n", "within the run's 10 s"),
    "infinite oversubscription": (BASE + "topology: {oversubscription: .inf}\n", "finite"),
    "infinite RED max": (BASE + "controller: {ecn: {classes: {agents: {min_kb: 1, max_kb: "
                                ".inf, probability: 0.5}}}}\n", "finite"),
    # wrong types that used to become the default
    "topology a list": (BASE + "topology: []\n", "topology: must be a mapping"),
    "topology false": (BASE + "topology: false\n", "topology: must be a mapping"),
    "topology empty string": (BASE + "topology: ''\n", "topology: must be a mapping"),
    "variants empty": (BASE + "variants: []\n", "variants: must be a list of one"),
    "variants a mapping": (BASE + "variants: {}\n", "variants: must be a list of one"),
    "variant topology a list": (BASE + "variants: [{name: a, topology: []}]\n",
                                "variants[0].topology: must be a mapping"),
    # names that reach the host
    "PoP path": (backbone(pops__0__name="../../etc"), "backbone.pops[0].name"),
    "PoP command": (backbone(pops__0__name="p1 link del dev eth0 #"), "backbone.pops[0].name"),
    "PoP substitution": (backbone(pops__0__name="$(id)"), "backbone.pops[0].name"),
    "PoP newline": (backbone(pops__0__name="nyc\n"), "backbone.pops[0].name"),
    "PoP empty": (backbone(pops__0__name=""), "backbone.pops[0].name"),
    "region path": (backbone(regions__0__name="../x"), "backbone.regions[0].name"),
    "region named as a PoP": (backbone(regions__0__name="nyc"), "is also pops"),
    "link command": (backbone(links__0__name="a;b"), "backbone.links[0].name"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_file_is_one_short_line_and_exit_2(name, tmp_path, capsys):
    text, words = CASES[name]
    path = tmp_path / "s.yaml"
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main(["validate", str(path)]) == 2
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert out.out == "" and len(lines) == 1, out
    assert words in lines[0] and len(lines[0]) < 600, lines[0][:300]


def test_the_expansion_bound_stops_a_billion_laughs_in_a_fresh_process(tmp_path):
    """As a user runs it: the 10^9-node document is refused without being walked (the
    timeout only keeps a regression from hanging the suite)."""
    path = tmp_path / "lol.yaml"
    path.write_text("name: h\n" + laughs(9) + "description: *l9\n")
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "validate", str(path)],
                          capture_output=True, text=True, timeout=60, cwd=REPO)
    assert done.returncode == 2 and "aliases expanded" in done.stderr, done.stderr


def test_a_lab_name_with_a_trailing_newline_is_refused():
    from testbed.errors import ConfigError
    from testbed.lab.state import check_name

    assert check_name("lab1") == "lab1"
    with pytest.raises(ConfigError):
        check_name("lab1\n")


def test_every_shipped_backbone_keeps_its_names():
    for path in [REPO / "scenarios" / "cross-region-writes.yaml",
                 *sorted((REPO / "labs").glob("lab07_*/*/backbone.yaml"))]:
        assert main(["validate", str(path)]) == 0, path
