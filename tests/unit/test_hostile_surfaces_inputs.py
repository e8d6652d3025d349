"""Hostile input at the lab's surfaces: what a server answers the file mirror of a lab over
several machines, scenario files and command-line flags.

A crafted mirror answer is refused whole: nothing is written on this machine (the lab
runs as root), the server's part ends, and the error is one line naming the server. A
crafted scenario or flag ends with exit status 2 and one line naming its field, before
anything is made on the host.
"""

from __future__ import annotations

import base64
import hashlib
import os
import random
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Annotated

import pytest
import yaml
from pydantic import Field, TypeAdapter, ValidationError

from testbed.cluster import mirror as mirroring
from testbed.cluster.mirror import Mirror
from testbed.cluster.part import Part
from testbed.core.cli import main
from testbed.errors import ServerAnswerError
from testbed.host.naming import RUN_ROOT
from topologies import backbone_check

REPO = Path(__file__).resolve().parents[2]
KEYS = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ5 root@lab\n"


# -- the file mirror -------------------------------------------------------------------
class HostileServer(Part):
    """A server's part (compromised or broken) whose ``read`` answers are the test's."""

    def __init__(self, log: Path):
        super().__init__(SimpleNamespace(server="gpu2"), 1, log)
        self.answer: object = {}

    def ask(self, op, timeout=60.0, **fields):
        return self.answer(fields["paths"]) if op == "read" else True


def entry(data: bytes, start: int = 0) -> list:
    return [start + len(data), start, base64.b64encode(data).decode()]


def snapshot(top: Path) -> dict[str, tuple]:
    """Every entry under ``top`` as it is (a link as its target, a FIFO unopened)."""
    out = {}
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            path = Path(folder) / name
            rel = str(path.relative_to(top))
            if path.is_symlink():
                out[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                out[rel] = ("dir",)
            elif path.is_fifo():
                out[rel] = ("fifo",)
            else:
                out[rel] = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
    return out


def _link_out(here: Path, home: Path) -> None:
    (here / "rank0.jsonl").symlink_to(home / "authorized_keys")


def _folder_out(here: Path, home: Path) -> None:
    (here / "sub").symlink_to(home)


def _link_in(here: Path, home: Path) -> None:
    (here / "training.json").write_text('{"ranks": 2}')
    (here / "rank0.jsonl").symlink_to(here / "training.json")


def _fifo(here: Path, home: Path) -> None:
    os.mkfifo(here / "rank0.jsonl")


OUT, READY = "rank0.jsonl", "sub/rank0.ready"
#: name: (what is already there, bytes this machine holds of OUT, the answer (from the
#: paths asked, this machine's folder and the folder outside it), words of the refusal)
MIRROR = {
    "a path never asked for": (None, 0, lambda asked, here, home: {
        str(here / "other.jsonl"): entry(b"x")}, "did not ask for"),
    "root's authorized_keys": (None, 0, lambda asked, here, home: {
        str(home / "authorized_keys"): entry(b"ssh-rsa EVIL\n")}, "did not ask for"),
    "dot-dot out of the run folder": (None, 0, lambda asked, here, home: {
        f"{here}/../home/authorized_keys": entry(b"ssh-rsa EVIL\n")}, "did not ask for"),
    "a link out as the file": (_link_out, 0, lambda asked, here, home: {
        str(here / OUT): entry(b"ssh-rsa EVIL\n")}, "resolves out of the run's folders"),
    "a linked folder out": (_folder_out, 0, lambda asked, here, home: {
        str(here / READY): entry(b"")}, "resolves out of the run's folders"),
    "a link within the run folder": (_link_in, 0, lambda asked, here, home: {
        str(here / OUT): entry(b"{}\n")}, "cannot open as a plain file"),
    "a FIFO in place of the file": (_fifo, 0, lambda asked, here, home: {
        str(here / OUT): entry(b"{}\n")}, "cannot open as a plain file"),
    "an offset of 2**40": (None, 0, lambda asked, here, home: {
        str(here / OUT): entry(b"x", 2**40)}, "starts at byte 1099511627776"),
    "an offset past what is held": (None, 10, lambda asked, here, home: {
        str(here / OUT): entry(b"x", 11)}, "this machine holds 10"),
    "an offset short of what is held": (None, 10, lambda asked, here, home: {
        str(here / OUT): entry(b"x", 4)}, "this machine holds 10"),
    "a negative offset": (None, 0, lambda asked, here, home: {
        str(here / OUT): entry(b"x", -1)}, "starts at byte -1"),
    "a payload over the bound": (None, 0, lambda asked, here, home: {
        str(here / OUT): entry(b"x" * (mirroring.READ_MAX_BYTES + 1))}, "carries over"),
    "two files over the bound": (None, 0, lambda asked, here, home: {
        str(here / OUT): entry(b"x" * 3000), str(here / READY): entry(b"y" * 2000)},
        "carries over"),
    "not base64": (None, 0, lambda asked, here, home: {
        str(here / OUT): [4, 0, "@@@@"]}, "is not base64"),
    "a size that is not start and data": (None, 0, lambda asked, here, home: {
        str(here / OUT): [2**40, 0, base64.b64encode(b"x").decode()]}, "says 1099511627776"),
    "a start that is a string": (None, 0, lambda asked, here, home: {
        str(here / OUT): [1, "0", "eA=="]}, "is not [size, start, base64 text]"),
    "a start that is true": (None, 0, lambda asked, here, home: {
        str(here / OUT): [1, True, "eA=="]}, "is not [size, start, base64 text]"),
    "an entry that is a mapping": (None, 0, lambda asked, here, home: {
        str(here / OUT): {"size": 1}}, "is not [size, start, base64 text]"),
    "an answer that is a list": (None, 0, lambda asked, here, home: [
        str(here / OUT)], "is not a mapping of files"),
    "one good file and one not asked for": (None, 0, lambda asked, here, home: {
        str(here / OUT): entry(b"{}\n"), str(here / "other.jsonl"): entry(b"x")},
        "did not ask for"),
}


@pytest.mark.parametrize("name", sorted(MIRROR))
def test_a_crafted_mirror_answer_is_refused_and_writes_nothing(name, tmp_path, monkeypatch):
    monkeypatch.setattr(mirroring, "READ_MAX_BYTES", 4096)  # a small bound: quick to pass
    prepare, held, answer, words = MIRROR[name]
    top, logs = tmp_path / "top", tmp_path / "logs"
    here, home = top / "run", top / "home"
    for folder in (here, home, logs):
        folder.mkdir(parents=True)
    (home / "authorized_keys").write_text(KEYS)
    server = HostileServer(logs / "part.log")
    mirror = Mirror(server, [str(here)])
    # the helper starts: what it will write there is not there yet (or, held: 10 bytes
    # of it came already)
    server.answer = lambda asked: ({str(here / OUT): entry(b"0123456789")} if held else {})
    mirror.watch(["python3", "--out", str(here / OUT), "--ready-file", str(here / READY)])
    mirror.stop()  # syncs by hand below
    if prepare:  # what a hostile hand made of the helper's files since
        prepare(here, home)
    before = snapshot(top)
    server.answer = lambda asked: answer(asked, here, home)
    with pytest.raises(ServerAnswerError) as err:
        mirror.sync()
    text = str(err.value)
    assert text.startswith("server gpu2: ") and "\n" not in text and len(text) < 600, text
    assert words in text, text
    assert snapshot(top) == before
    assert (home / "authorized_keys").read_text() == KEYS
    assert "ended this part" in (logs / "part.log").read_text()
    server.answer = lambda asked: {str(here / OUT): entry(b"fine")}  # the part is over
    with pytest.raises(ServerAnswerError):
        mirror.sync()
    assert snapshot(top) == before


# -- scenario files --------------------------------------------------------------------
BASE = "name: h\nagents: {enabled: false}\n"


def backbone(change) -> str:
    doc = yaml.safe_load((REPO / "labs" / "lab07_backbone" / "starter" /
                          "backbone.yaml").read_text())
    change(doc["backbone"])
    return yaml.safe_dump(doc)


def _ring(pops: int, parallel: int = 1):
    """A ring of ``pops`` PoPs, ``parallel`` links a span, two regions."""
    def change(bb):
        names = [f"p{i}" for i in range(pops)]
        bb["pops"] = [{"name": n, "area": "na"} for n in names]
        bb["regions"] = [{"name": "ra", "pops": names[:2]}, {"name": "rb", "pops": names[2:4]}]
        bb["links"] = [{"name": f"l{i}-{k}", "a": names[i], "b": names[(i + 1) % pops],
                        "capacity_mbps": 100, "length_km": 100}
                       for i in range(pops) for k in range(parallel)]
        bb["risk_groups"], bb["faults"], bb["replication"] = [], [], []
    return change


def _groups(count: int):
    def change(bb):
        links = [lk["name"] for lk in bb["links"]]
        bb["risk_groups"] = [{"name": f"g{i}", "links": [links[i % len(links)]]}
                             for i in range(count)]
        bb["faults"] = []
    return change


def _complete(pops: int):
    """Every PoP linked to every other, twice (the search of every simple path never
    ended on such a graph of 9 PoPs)."""
    def change(bb):
        names = [f"p{i}" for i in range(pops)]
        bb["pops"] = [{"name": n, "area": "na"} for n in names]
        bb["regions"] = [{"name": "ra", "pops": names[:2]}, {"name": "rb", "pops": names[2:4]}]
        bb["links"] = [{"name": f"p{i}-p{j}-{k}", "a": a, "b": b, "capacity_mbps": 100,
                        "length_km": 100}
                       for i, a in enumerate(names) for j, b in enumerate(names) if i < j
                       for k in (1, 2)]
        bb["risk_groups"], bb["faults"], bb["replication"] = [], [], []
    return change


#: name: (scenario text, the field its one line names)
FILES = {
    "a seed of 5,000 digits": (BASE + "seed: " + "9" * 5000 + "\n", "seed: a number of 5000"),
    "a nested integer of 5,000 digits": (BASE + "topology: {nodes: " + "1" * 5000 + "}\n",
                                         "topology.nodes: a number of 5000"),
    "a plug-in's parameter of .inf": (
        BASE + "workloads: [{kind: 'examples.workloads.udp_echo:UdpEcho', "
               "params: {rate: .inf}}]\n", "workloads[0].params.rate: must be a finite number"),
    "a plug-in's parameter of 1.0e+400": (
        BASE + "workloads: [{kind: 'examples.workloads.udp_echo:UdpEcho', "
               "params: {rate: 1.0e+400}}]\n", "workloads[0].params.rate: must be a finite"),
    "PoPs over the design check's cap": (backbone(_ring(backbone_check.MAX_POPS + 1)),
                                         "backbone.pops: at most 32 PoPs"),
    "links over the design check's cap": (backbone(_ring(8, 17)),
                                          "backbone.links: at most 128 PoP-PoP links"),
    "risk groups over the design check's cap": (
        backbone(_groups(backbone_check.MAX_GROUPS + 1)),
        "backbone.risk_groups: at most 64 risk groups"),
    "a server with a newline in its user": (BASE + 'servers: ["root\\n@gpu2"]\n',
                                            "servers[0]: 'root\\n' is not a user name"),
    "a server with a newline in its host": (BASE + 'servers: ["gpu2\\n:22"]\n',
                                            "servers[0]: 'gpu2\\n' is not a host name"),
}


def _host_state() -> dict[str, set[str]]:
    """What the lab could have made on the host: run folders, namespaces, interfaces."""
    out = {}
    for folder in (RUN_ROOT, Path("/run/netns"), Path("/sys/class/net")):
        out[str(folder)] = set(os.listdir(folder)) if folder.is_dir() else set()
    return out


def one_line(argv: list[str], capsys, tmp_path: Path, monkeypatch) -> str:
    """``testbed ARGV`` from ``tmp_path``: exit status 2, one line on stderr, nothing on
    stdout, nothing new on the host or in the folder it ran in; the line."""
    monkeypatch.chdir(tmp_path)
    before, files = _host_state(), set(os.listdir(tmp_path))
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse
        code = exc.code
    out = capsys.readouterr()
    lines = out.err.strip().splitlines()
    assert code == 2 and out.out == "" and len(lines) == 1, (code, out)
    assert _host_state() == before and set(os.listdir(tmp_path)) == files
    return lines[0]


#: each file through validate and through calc --scenario (which loads plug-ins: their own
#: models read their parameters there, so a plug-in's parameters go through validate only)
VERBS = {"validate": ["validate"], "calc": ["calc", "--scenario"]}
READS = [(verb, name) for name in sorted(FILES) for verb in VERBS
         if not (verb == "calc" and "plug-in" in name)]


@pytest.mark.parametrize(("verb", "name"), READS, ids=[f"{v}-{n}" for v, n in READS])
def test_a_crafted_scenario_is_one_line_naming_its_field(verb, name, tmp_path, capsys,
                                                        monkeypatch):
    text, words = FILES[name]
    path = tmp_path / "s.yaml"
    path.write_text(text)
    line = one_line([*VERBS[verb], str(path)], capsys, tmp_path, monkeypatch)
    assert words in line and len(line) < 600, line


def _tangled(bb):
    """8 PoPs in a ring with 12 chords drawn at random (seeded), three risk groups of three
    links drawn at random: links that do not meet, one in two groups."""
    rng = random.Random(6)
    ends = [(i, (i + 1) % 8) for i in range(8)]
    while len(ends) < 20:
        ends.append(tuple(rng.sample(range(8), 2)))
    _ring(8)(bb)
    bb["links"] = [{"name": f"l{k}", "a": f"p{a}", "b": f"p{b}", "capacity_mbps": 100,
                    "length_km": 100} for k, (a, b) in enumerate(ends)]
    bb["risk_groups"] = [{"name": f"g{j}", "links": [f"l{k}" for k in rng.sample(range(20), 3)]}
                         for j in range(3)]


def test_a_design_check_past_its_steps_is_one_line_naming_the_risk_groups(
        tmp_path, capsys, monkeypatch):
    """Risk groups whose links do not meet make the count a search, capped in steps: past
    the cap the scenario is refused naming its risk groups (this backbone takes about
    500,000 steps, a tenth of the real cap; the cap is lowered below that here)."""
    monkeypatch.setattr(backbone_check, "MAX_WORK", 100_000)
    path = tmp_path / "s.yaml"
    path.write_text(backbone(_tangled))
    line = one_line(["validate", str(path)], capsys, tmp_path, monkeypatch)
    assert line.startswith("testbed: error: backbone.risk_groups: the design check gave up "
                           "after 100000 steps"), line
    monkeypatch.undo()  # and under the real cap, it answers
    assert main(["validate", str(path)]) in (0, 2)
    assert "gave up" not in capsys.readouterr().err


def test_a_complete_backbone_validates_within_the_checks_steps(tmp_path, capsys):
    """Eleven PoPs each linked twice to every other (110 links, within the cap of 128):
    the design check answers at once, where listing every simple path never ended."""
    path = tmp_path / "s.yaml"
    path.write_text(backbone(_complete(11)))
    assert main(["validate", str(path)]) == 0, capsys.readouterr().err


# -- command-line flags ----------------------------------------------------------------
#: name: (argv, the flag its one line names and why)
FLAGS = {
    "calc switch inf": (["calc", "--switch-tbps", "inf", "--gpu-gbps", "1600", "--planes", "8"],
                        "--switch-tbps: must be a finite number"),
    "calc GPU 1e400": (["calc", "--switch-tbps", "102.4", "--gpu-gbps", "1e400", "--planes",
                        "8"], "--gpu-gbps: must be a finite number"),
    "calc planes of 5,000 digits": (["calc", "--switch-tbps", "102.4", "--gpu-gbps", "1600",
                                     "--planes", "9" * 5000], "--planes: must be an integer"),
    "calc cores 1e3": (["calc", "--scenario", "agents-vs-training", "--cores", "1e3"],
                       "--cores: must be an integer"),
    "calc machines of 5,000 digits": (["calc", "--scenario", "agents-vs-training",
                                       "--machines", "1" * 5000],
                                      "--machines: must be an integer"),
    "fault loss NaN": (["fault", "lf", "degrade", "p0l0-p0s0", "--loss", "nan"],
                       "--loss: must be a finite number"),
    "fault delay inf": (["fault", "lf", "delay", "p0l0-p0s0", "--delay-ms", "inf"],
                        "--delay-ms: must be a finite number"),
    "fault count of 5,000 digits": (["fault", "lf", "link_flap", "p0l0-p0s0", "--count",
                                     "9" * 5000], "--count: must be an integer"),
    "capture seconds inf": (["capture", "lf", "p0l0e3", "--seconds", "inf"],
                            "--seconds: must be a finite number"),
    "capture count 2**70": (["capture", "lf", "p0l0e3", "--count", str(2**70)],
                            "--count: must be an integer"),
    "expand leaves 1e3": (["expand", "lf", "--leaves", "1e3", "--nodes", "4"],
                          "--leaves: must be an integer"),
    "expand seed of 5,000 digits": (["expand", "lf", "--leaves", "1", "--nodes", "4",
                                     "--seed", "9" * 5000], "--seed: must be an integer"),
}


@pytest.mark.parametrize("name", sorted(FLAGS))
def test_a_crafted_flag_is_one_line_naming_it(name, tmp_path, capsys, monkeypatch):
    argv, words = FLAGS[name]
    line = one_line(argv, capsys, tmp_path, monkeypatch)
    assert words in line and len(line) < 600, line


# -- names ------------------------------------------------------------------------------
PACKAGES = ("testbed", "controllers", "topologies", "traffic")
_COMPILED = re.compile(r"^(\w+)\s*=\s*re\.compile\(\s*r?([\"'])(.*?)\2", re.M)


def _sources() -> dict[Path, str]:
    return {path: path.read_text() for package in PACKAGES
            for path in sorted((REPO / package).rglob("*.py"))}


#: patterns that end in ``$`` and guard no name: the report renderer's grammar of one
#: line of Markdown (lines already split, so no newline is in one)
# line patterns (re.M: ``$`` ends each line of a text), not guards of a whole name
NOT_GUARDS = {("testbed/reports/markdown.py", name)
              for name in ("HEADING", "BULLET", "NUMBERED", "RULE", "TABLE_SEPARATOR")} | {
              ("testbed/reports/students.py", name) for name in ("_SEED_LINE", "_SEEDS_LINE")}


def test_every_pattern_that_ends_in_a_dollar_is_matched_whole():
    """``$`` also matches before a final newline: a pattern that ends in it guards a whole
    name only through ``fullmatch`` (a server named ``gpu2\\n`` reached ssh's arguments
    through ``match``). Every such compiled pattern of the lab's packages is used with
    ``fullmatch`` alone, and no ``re.match``/``re.search`` takes one."""
    sources = _sources()
    guards = {(str(path.relative_to(REPO)), name) for path, text in sources.items()
              for name, _, pattern in _COMPILED.findall(text)
              if pattern.endswith("$") and not pattern.endswith("\\$")} - NOT_GUARDS
    names = {name for _, name in guards}
    assert {"NAME", "DOTTED", "MODULE", "_RUN_ID", "_FOLDER"} <= names  # the scan finds them
    loose = [f"{path.relative_to(REPO)}: {m.group(0)}" for path, text in sources.items()
             for m in re.finditer(r"\b(\w+)\.(match|search)\(", text)
             if m.group(1) in names and (str(path.relative_to(REPO)), m.group(1))
             not in NOT_GUARDS]
    loose += [f"{path.relative_to(REPO)}: {m.group(0)}" for path, text in sources.items()
              for m in re.finditer(r"\bre\.(match|search)\(\s*r?([\"'])[^\"']*\$\2", text)]
    assert not loose, loose


def _model_pattern(model, field: str) -> str:
    return next(m.pattern for m in model.model_fields[field].metadata if hasattr(m, "pattern"))


def _pydantic_guards() -> dict[str, tuple[object, str]]:
    from controllers.schema import Controller
    from testbed.experiments.fabric.schema import Name as VariantName
    from testbed.experiments.fabric.schema import PluginWorkload
    from testbed.fabric.qos import Name as ClassName
    from topologies.explicit import Node

    apps = Controller.model_fields["apps"].annotation.__args__[0]
    remote = Controller.model_fields["remote"].annotation.__args__[0]
    return {"a variant's name": (VariantName, "v1"), "a traffic class's name": (ClassName, "gold"),
            "a controller app": (apps, "examples.apps.pin_flow:PinFlow"),
            "a remote controller": (remote, "127.0.0.1:6653"),
            "a workload kind": (Annotated[str, Field(pattern=_model_pattern(PluginWorkload,
                                                                            "kind"))],
                                "examples.workloads.udp_echo:UdpEcho"),
            "an explicit node's role": (Annotated[str, Field(pattern=_model_pattern(Node,
                                                                                   "role"))],
                                        "leaf")}


@pytest.mark.parametrize("name", sorted(_pydantic_guards()))
def test_a_schema_pattern_refuses_a_trailing_newline(name):
    """pydantic matches ``pattern=`` with Rust's regex, whose ``$`` is the end of the text
    (unlike Python's): checked, not assumed, for every name a scenario's schema guards."""
    kind, good = _pydantic_guards()[name]
    adapter = TypeAdapter(kind)
    assert adapter.validate_python(good) == good
    with pytest.raises(ValidationError):
        adapter.validate_python(good + "\n")
