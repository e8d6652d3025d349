"""A lab over several machines, what runs without a second machine: servers as written,
tunnel ends and keys, the mirror of a remote helper's files (against the part's own file
requests, the other machine's folder played by a folder here), one-line errors for bad
servers. The real thing runs under make cluster-test (tests/cluster)."""

from __future__ import annotations

import base64
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.cluster import mirror as mirroring
from testbed.cluster import placement, remote
from testbed.cluster.mirror import Mirror
from testbed.cluster.part import Part
from testbed.cluster.runtime import RemoteHost, tunnel_key, tunnels
from testbed.cluster.servers import Server, parse, parse_all
from testbed.errors import ConfigError, ServerAnswerError
from testbed.host.procs import wait_for
from topologies.leafspine import build_fabric

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("text", "server"), [
    ("10.0.0.2", Server(None, "10.0.0.2", None)),
    ("lab@gpu-2.example.org:2222", Server("lab", "gpu-2.example.org", 2222)),
    ("root@h", Server("root", "h", None)),
])
def test_a_server_is_user_host_and_port(text, server):
    assert parse(text, "servers[0]") == server
    assert str(server) == text


@pytest.mark.parametrize(("text", "why"), [
    ("", "a server is written [user@]host[:port]"),
    ("a b", "is not a host name"),
    ("Root@h", "is not a user name"),
    ("h:0", "is not 1-65535"),
    ("h:ssh", "is not 1-65535"),
    ("localhost", "is this machine"),
    ("root@127.0.0.1", "is this machine"),
])
def test_a_bad_server_is_refused_naming_its_field(text, why):
    with pytest.raises(ConfigError) as err:
        parse_all([text])
    assert err.value.field == "servers[0]" and why in err.value.reason


def test_a_server_listed_twice_is_refused():
    assert [s.host for s in parse_all("a,b")] == ["a", "b"]
    with pytest.raises(ConfigError, match=r"--servers\[1\]: a is listed twice"):
        parse_all("a,root@a", "--servers")


def test_every_cut_link_has_an_end_on_each_machine_with_one_key():
    spec = build_fabric(prefix="tb1a2b", planes=2, nodes=8, leaves_per_plane=2,
                        spines_per_plane=2)
    place = placement.place(spec, 2)
    ends = tunnels(spec, place, lambda m, n: f"10.9.0.{m + 1}", "1a2b")
    assert len(ends[0]) == len(ends[1]) == len(place.cut) == 4
    for lk, a_end, b_end in zip(place.cut, *(sorted(e, key=lambda t: t.key) for e in ends),
                                strict=True):
        mine = {a_end.ifname, b_end.ifname}
        assert mine == {lk.a_intf, lk.b_intf}
        assert a_end.key == b_end.key
        assert (a_end.local, a_end.remote) == (b_end.remote, b_end.local)
        for end in (a_end, b_end):
            assert place.where[end.node] == (0 if end in ends[0] else 1)
            assert end.mac is None  # switch ports: cut links here are spine uplinks
    assert len({t.key for t in ends[0]}) == 4
    assert tunnel_key("1a2b", 0) != tunnel_key("1a2c", 0)  # two labs, one pair of machines


def test_a_cut_host_link_carries_the_hosts_mac():
    spec = build_fabric(prefix="tb1a2b", planes=2, nodes=4, leaves_per_plane=1,
                        spines_per_plane=1)
    plane = next(p for p in placement.candidates(spec, 2) if p.way == "plane")
    ends = tunnels(spec, plane, lambda m, n: f"10.9.0.{m + 1}", "1a2b")
    host_ends = [t for e in ends for t in e if not spec.is_switch(t.node)]
    assert host_ends and all(
        t.mac == spec.host(t.node).interface_by_name(t.ifname).mac for t in host_ends)


class FakePart:
    """The part's file requests (:data:`testbed.cluster.remote.REQUESTS`) on a folder that
    plays the other machine: a path P there is ``there / P``."""

    def __init__(self, there: Path):
        self.there = there
        self.asked: list[str] = []

    def _at(self, path: str) -> str:
        return str(self.there / path.lstrip("/"))

    def ask(self, op: str, **fields):
        self.asked.append(op)
        if op == "prepare":
            fields["dirs"] = [self._at(d) for d in fields["dirs"]]
        elif op == "write":
            fields["path"] = self._at(fields["path"])
        elif op == "read":
            answer = remote.REQUESTS["read"]({"paths": {self._at(p): o for p, o in
                                                     fields["paths"].items()}})
            return {p[len(str(self.there)):]: v for p, v in answer.items()}
        return remote.REQUESTS[op](fields)


def test_the_mirror_carries_a_helpers_files_both_ways(tmp_path):
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    part = FakePart(there)
    mirror = Mirror(part, [str(here)])
    config, out, ready, start = (here / "training.json", here / "rank0.jsonl",
                                 here / "run" / "rank0.ready", here / "run" / "start")
    config.write_text('{"ranks": 2}')
    files = mirror.watch(["/usr/bin/python3", "-m", "traffic", "--config", str(config),
                          "--out", str(out), "--ready-file", str(ready), "--start-file",
                          str(start)])
    mirror.stop()  # syncs by hand below: no timing in a unit test
    assert files == [str(config), str(out), str(ready), str(start)]
    mirror_of = lambda p: there / str(p).lstrip("/")  # noqa: E731
    # what exists here goes there before the helper starts; folders of the rest are made
    assert mirror_of(config).read_text() == '{"ranks": 2}'
    assert mirror_of(ready).parent.is_dir() and not mirror_of(out).exists()
    # what the helper writes there comes back, by what was appended
    mirror_of(ready).write_text("")
    mirror_of(out).write_text('{"iteration": 0}\n')
    mirror.sync()
    assert ready.exists() and out.read_text() == '{"iteration": 0}\n'
    with open(mirror_of(out), "a") as f:
        f.write('{"iteration": 1}\n')
    mirror.sync()
    assert out.read_text() == '{"iteration": 0}\n{"iteration": 1}\n'
    # a file written anew there (shorter) replaces the copy here
    mirror_of(out).write_text("{}\n")
    mirror.sync()
    assert out.read_text() == "{}\n"
    # a file made here later (the start signal) goes there; one changed here goes again
    start.write_text("1700000000.0")
    config.write_text('{"ranks": 3}')
    mirror.sync()
    assert mirror_of(start).read_text() == "1700000000.0"
    assert mirror_of(config).read_text() == '{"ranks": 3}'
    # nothing that did not change is sent again
    part.asked.clear()
    mirror.sync()
    assert "write" not in part.asked


def test_a_file_larger_than_one_answer_comes_over_several(tmp_path, monkeypatch):
    """A part's ``read`` answer carries at most READ_MAX_BYTES (the lab's machine refuses
    more); a larger file comes whole over several answers of one sync."""
    monkeypatch.setattr(remote, "READ_MAX_BYTES", 1000)
    monkeypatch.setattr(mirroring, "READ_MAX_BYTES", 1000)
    here, there = tmp_path / "here", tmp_path / "there"
    here.mkdir()
    part = FakePart(there)
    sizes = []
    read = remote.REQUESTS["read"]

    def counting(message):
        answer = read(message)
        sizes.append(sum(len(base64.b64decode(v[2])) for v in answer.values()))
        return answer

    monkeypatch.setitem(remote.REQUESTS, "read", counting)
    mirror = Mirror(part, [str(here)])
    out = here / "rank0.jsonl"
    mirror.watch(["--out", str(out)])
    mirror.stop()
    data = bytes(range(256)) * 14  # 3,584 bytes
    (there / str(out).lstrip("/")).write_bytes(data)
    sizes.clear()
    mirror.sync()
    assert out.read_bytes() == data
    assert sizes == [1000, 1000, 1000, 584]


def test_a_part_answer_that_is_not_json_ends_the_part(tmp_path):
    """A line from a server's part that is not a JSON object ends that part (its session)
    with one line naming the server."""
    part = Part(SimpleNamespace(server="gpu2"), 1, tmp_path / "part.log")
    part.proc = subprocess.Popen(["sleep", "30"], stdin=subprocess.PIPE, text=True)
    try:
        part.lines.put("not json\n")
        with pytest.raises(ServerAnswerError) as err:
            part.ask("queue_stats")
        assert str(err.value).startswith("server gpu2: its answer to queue_stats is not a "
                                         "JSON object")
        assert "\n" not in str(err.value)
        assert part.proc.wait(5) is not None  # ended
        assert "ended this part" in (tmp_path / "part.log").read_text()
    finally:
        part.proc.kill()
        part.proc.wait()


class LocalConn:
    """A server's connection played by this machine: its commands run here, as ssh would
    run them there (each word as it is: ssh's remote shell gets them shlex-joined)."""

    server = "gpu2"

    def argv(self, remote_argv, *, root=True):
        return list(remote_argv)

    def run(self, remote_argv, *, root=True, timeout=60.0, stdin=None):
        return subprocess.run(list(remote_argv), capture_output=True, text=True,
                              timeout=timeout)


@dataclass(frozen=True)
class HostHere(RemoteHost):
    """A remote fabric host whose commands run here, outside any namespace."""

    def _inside(self, argv):
        return list(argv)


def test_a_remote_helpers_pid_file_reaches_its_shell_as_an_argument(tmp_path, monkeypatch):
    """The pid file of a helper on a server is an argument of a constant shell script,
    never part of the script: a name with shell words in it starts and stops the helper
    and runs nothing else."""
    monkeypatch.chdir(tmp_path)
    run_folder = tmp_path / "run"
    run_folder.mkdir()
    host = HostHere("n0;touch pwned;", 0, LocalConn(), str(run_folder))
    helper = host.spawn("w$(touch pwned2)", ["sleep", "30"], pid_dir=tmp_path / "pids")
    pid_file = Path(helper.remote_pid_file)
    try:
        assert pid_file.parent == run_folder
        assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 5)
        assert pid_file.read_text().strip() == str(helper.pid)
    finally:
        helper.stop(grace=1)
    assert not helper.alive() and not pid_file.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pids", "run"]


def run_testbed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.core.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize(("args", "line"), [
    (("up", "agents-vs-training", "--servers", "a b"),
     "testbed: error: --servers[0]: 'a b' is not a host name or IPv4 address"),
    (("up", "backbone-failover", "--servers", "10.0.0.2"),
     "testbed: error: --servers: a backbone lab runs on one machine; a fabric lab can be "
     "spread over several"),
    (("run", "macsec", "--servers", "10.0.0.2"),
     "testbed: error: --servers: a macsec scenario runs on one machine; a fabric scenario "
     "can be spread over several"),
    (("run", "rack-acceptance", "--servers", "10.0.0.2"),
     "testbed: error: variants[0].acceptance: a fabric over several machines does not run "
     "acceptance checks yet"),
])
def test_bad_servers_end_in_one_line_before_anything_is_made(args, line):
    done = run_testbed(*args)
    assert done.returncode == 2
    assert done.stderr.strip() == line


def test_a_scenarios_servers_are_checked_as_the_flag_is(tmp_path):
    text = (REPO / "scenarios" / "agents-vs-training.yaml").read_text()
    bad = tmp_path / "bad.yaml"
    bad.write_text(text + "\nservers: [gpu2, gpu2]\n")
    done = run_testbed("validate", str(bad))
    assert done.returncode == 2
    assert done.stderr.strip() == "testbed: error: servers[1]: gpu2 is listed twice"
    good = tmp_path / "good.yaml"
    good.write_text(text + "\nservers: [lab@gpu2]\n")
    assert run_testbed("validate", str(good)).returncode == 0


def test_a_part_samples_its_machine_over_the_window_only(tmp_path, monkeypatch):
    """The part's protocol (testbed.cluster.remote.part) on a stand-in fabric: its monitor
    runs from ``watch`` to ``unwatch`` (none while the lab only stands), answers the
    window's samples, and ``stop`` tears the fabric down."""
    import io
    import json
    import time
    from types import SimpleNamespace

    from testbed.core import fidelity, fidelity_verdict
    from testbed.fabric import net
    from testbed.host import capabilities, naming

    built = []

    class StandIn:
        def __init__(self, spec, caps, **kwargs):
            self.times = SimpleNamespace(start_s=0.1)
            built.append(self)

        def start(self, await_paths, check=True):
            return self.times

        def host_pid(self, name):
            return 4242

        def stop(self):
            self.stopped = True
            return 0.0

    class Fast(fidelity.Monitor):  # a sample every 0.1 s, not every second
        def __init__(self, path, **kwargs):
            super().__init__(path, thresholds=fidelity_verdict.Thresholds(interval_s=0.1))

    monkeypatch.setattr(net, "Fabric", StandIn)
    monkeypatch.setattr(fidelity, "Monitor", Fast)
    monkeypatch.setattr(capabilities, "probe", lambda run_id: None)
    monkeypatch.setattr(naming, "run_dir", lambda run_id: tmp_path)
    spec = build_fabric(prefix="tb1a2b", nodes=4, leaves_per_plane=2, spines_per_plane=1)

    def requests():
        time.sleep(0.3)  # standing: nothing sampled
        assert not list(tmp_path.glob("fidelity-*.jsonl"))
        yield json.dumps({"op": "watch"})
        deadline = time.monotonic() + 30  # three samples of 0.1 s, however slow the host
        while time.monotonic() < deadline and sum(
                len(p.read_text().splitlines()) for p in tmp_path.glob("fidelity-*.jsonl")) < 3:
            time.sleep(0.05)
        yield json.dumps({"op": "unwatch"})
        yield json.dumps({"op": "stop"})

    answers = io.StringIO()
    request = {"run_id": "1a2b", "own_folder": False, "spec": spec.to_dict(),
               "here": [h.name for h in spec.hosts], "tunnels": [], "controller_port": 6653}
    assert remote.part(request, requests(), answers) == 0
    said = [json.loads(line) for line in answers.getvalue().splitlines()]
    assert list(said[0]) == ["ready"] and said[1] == {"watch": True}
    samples = said[2]["unwatch"]
    assert len(samples) >= 3 and all(s["measuring"] and "host_idle" in s for s in samples)
    assert said[3] == {"stopped": 0.0} and built[0].stopped
    assert fidelity_verdict.server_record("gpu2", samples)["fidelity"]["samples"] == len(samples)


def test_testbed_clean_cleans_a_dead_runs_servers_too(monkeypatch, capsys):
    """The host layer knows no other machine: ``testbed clean`` hands it the cluster's
    cleaner, which removes what a dead run left on its servers before its folder goes."""
    import argparse

    from testbed.cluster.servers import clean_servers
    from testbed.core import cli
    from testbed.host import cleanup

    seen = {}

    def clean(**kwargs):
        seen.update(kwargs)
        return [], {}

    monkeypatch.setattr(cleanup, "clean", clean)
    assert cli.cmd_clean(argparse.Namespace(dry_run=True, force=False, run=None)) == 0
    assert seen["elsewhere"] is clean_servers
    assert capsys.readouterr().out.strip() == "nothing to clean"
