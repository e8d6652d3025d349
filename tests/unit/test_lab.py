"""Lab tooling without root: topology graphs (DOT, Mermaid, PNG), MACsec decryption to a
plaintext pcap and Wireshark's key file, scenario captures, lab records, one-line errors."""

from __future__ import annotations

import contextlib
import io
import json
import subprocess
from pathlib import Path

import pytest

from testbed.core.scenario import parse
from testbed.errors import ConfigError
from testbed.lab import state
from testbed.macsec.attacker import tampered_frame, untagged_frame
from testbed.macsec.config import LinkConfig
from testbed.macsec.decrypt import decrypt_to_pcap, key_reference, keys_from
from testbed.macsec.forwarder import build_secy
from testbed.macsec.wireshark import uat_text
from testbed.reports import graph
from topologies.backbone import small_backbone
from topologies.leafspine import build_fabric
from traffic.pcapfile import read_records, write_records

SMALL_DOT = r'''graph "small" {
  rankdir=BT; splines=line; node [fontname="Helvetica", fontsize=10];
  edge [fontname="Helvetica", fontsize=8];
  { rank=same;
    "n0" [shape=box, style=filled, fillcolor="#eeeeee", label="n0"];
    "n1" [shape=box, style=filled, fillcolor="#eeeeee", label="n1"];
  }
  { rank=same;
    "p0l0" [shape=ellipse, style=filled, fillcolor="#aec7e8", label="p0l0\nleaf p0"];
    "p1l0" [shape=ellipse, style=filled, fillcolor="#ffbb78", label="p1l0\nleaf p1"];
  }
  { rank=same;
    "p0s0" [shape=ellipse, style=filled, fillcolor="#aec7e8", label="p0s0\nspine p0"];
    "p1s0" [shape=ellipse, style=filled, fillcolor="#ffbb78", label="p1s0\nspine p1"];
  }
  "n0" -- "p0l0" [label="100 Mb/s", color="#1f77b4"];
  "n0" -- "p1l0" [label="100 Mb/s", color="#ff7f0e"];
  "n1" -- "p0l0" [label="100 Mb/s", color="#1f77b4"];
  "n1" -- "p1l0" [label="100 Mb/s", color="#ff7f0e"];
  "p0l0" -- "p0s0" [label="200 Mb/s", color="#1f77b4"];
  "p1l0" -- "p1s0" [label="200 Mb/s", color="#ff7f0e"];
}
'''


def small_spec():
    return build_fabric(prefix="tb0000", planes=2, nodes=2, leaves_per_plane=1,
                        spines_per_plane=1, link_mbps=100)


def test_dot_of_a_small_two_plane_fabric() -> None:
    assert graph.to_dot(graph.fabric_graph(small_spec()), "small") == SMALL_DOT


def test_unknown_roles_and_tiers_draw_above_the_known_ones() -> None:
    from dataclasses import replace

    spec = small_spec()
    renamed = replace(spec, switches=tuple(replace(s, role="superspine" if s.role == "spine"
                                                   else "odd") for s in spec.switches))
    g = graph.fabric_graph(renamed)  # the spec's tiers win over the role words
    assert {g.nodes[n]["tier"] for n in ("p0s0", "p1s0")} == {2}
    assert {g.nodes[n]["tier"] for n in ("p0l0", "p1l0")} == {1}
    no_tiers = replace(renamed, switches=tuple(replace(s, tier=None)
                                               for s in renamed.switches))
    g = graph.fabric_graph(no_tiers)  # without tiers: known roles first, unknown above
    assert {g.nodes[n]["tier"] for n in ("p0s0", "p1s0")} == {3}
    assert {g.nodes[n]["tier"] for n in ("p0l0", "p1l0")} == {4}


def test_mermaid_and_png(tmp_path: Path) -> None:
    g = graph.backbone_graph(small_backbone())
    text = graph.to_mermaid(g, "small")
    assert text.startswith("graph LR") and "km" in text
    assert text.count("---|") == g.number_of_edges()
    png = graph.to_png(g, "small", tmp_path / "bb.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fabric_png = graph.to_png(graph.fabric_graph(small_spec()), "f", tmp_path / "f.png")
    assert fabric_png.stat().st_size > 1000


def test_a_storage_scenario_draws_its_fabric() -> None:
    """storage-cache's GPU nodes on their leaves and the store alone on its own."""
    from testbed.core import scenario

    g, title = graph.scenario_graph(scenario.load(scenario.path_of("storage-cache")))
    assert title == "storage-cache"
    hosts = {n for n, d in g.nodes(data=True) if d["kind"] == "host"}
    assert hosts == {f"g{i}" for i in range(1, 9)} | {"st"}
    assert set(g.neighbors("st")) == {"ls"}


def cli(*args: str) -> subprocess.CompletedProcess:
    """``testbed ARGS`` in this process (its exit status, stdout and stderr)."""
    from testbed.core.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(list(args))
        except SystemExit as exc:  # argparse
            code = exc.code
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_graph_command(tmp_path: Path) -> None:
    done = cli("graph", "link-faults")
    assert done.returncode == 0 and done.stdout.startswith('graph "link-faults/')
    done = cli("graph", "backbone-failover", "-o", str(tmp_path / "bb.mmd"))
    assert done.returncode == 0 and (tmp_path / "bb.mmd").read_text().startswith("graph LR")
    for args in (("graph", "macsec"), ("graph", "link-faults", "--variant", "nope"),
                 ("graph", "no-such-scenario")):
        done = cli(*args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, args


def _keys(cfg: LinkConfig) -> dict:
    return {"links": [{"name": "t", "suite": cfg.suite, "encrypt": cfg.encrypt,
                       "salt": cfg.salt, "sides": {
                           s: {"sci": cfg.side(s).sci, "ssci": cfg.side(s).ssci,
                               "keys": {str(k): v for k, v in cfg.side(s).keys.items()}}
                           for s in "ab"}}]}


@pytest.mark.parametrize("suite", ["gcm-aes-128", "gcm-aes-xpn-256"])
def test_decrypt_writes_the_plaintext_with_timestamps(suite: str, tmp_path: Path) -> None:
    cfg = LinkConfig.generate("dx1", suite=suite)
    a = build_secy(cfg, "a")
    mac_a, mac_b = (bytes.fromhex(cfg.side(s).mac.replace(":", "")) for s in "ab")
    plain = [untagged_frame(mac_b, mac_a, "10.0.0.1", "10.0.0.2", i) for i in range(4)]
    wire = [a.protect(f) for f in plain]
    tampered, _ = tampered_frame(wire[-1], 0)
    records = [(100 + i, 7 * i, f) for i, f in enumerate([*wire, tampered, plain[0]])]
    write_records(tmp_path / "w.pcap", records)
    counts = decrypt_to_pcap(tmp_path / "w.pcap", _keys(cfg), tmp_path / "p.pcap")
    assert counts == {"frames": 6, "decrypted": 4, "failed": 1, "not_macsec": 1}
    out, nano = read_records(tmp_path / "p.pcap")
    assert not nano
    assert [f for _, _, f in out] == [*plain, plain[0]]
    assert [(s, u) for s, u, _ in out] == [(100, 0), (101, 7), (102, 14), (103, 21), (105, 35)]


def test_decrypt_command_and_keys_from_a_manifest(tmp_path: Path) -> None:
    cfg = LinkConfig.generate("dx2", suite="gcm-aes-128")
    a = build_secy(cfg, "a")
    mac_a, mac_b = (bytes.fromhex(cfg.side(s).mac.replace(":", "")) for s in "ab")
    frame = untagged_frame(mac_b, mac_a, "10.0.0.1", "10.0.0.2", 1)
    write_records(tmp_path / "w.pcap", [(1, 0, a.protect(frame))])
    (tmp_path / "macsec-keys.json").write_text(json.dumps(_keys(cfg)))
    manifest = {"scenario": "x", "macsec": {"keys": key_reference(_keys(cfg),
                                                                  "macsec-keys.json")}}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert cfg.side("a").keys[0] not in json.dumps(manifest)  # a fingerprint, not the key
    assert keys_from(manifest, tmp_path) == _keys(cfg)
    done = cli("decrypt", str(tmp_path / "w.pcap"), "--keys", str(tmp_path / "manifest.json"),
               "-o", str(tmp_path / "p.pcap"), "--wireshark", str(tmp_path / "psk"))
    assert done.returncode == 0, done.stderr
    assert "1 frames decrypted" in done.stdout
    assert read_records(tmp_path / "p.pcap")[0][0][2] == frame
    sak = cfg.side("a").keys[0].lower()
    assert f'{sak},"t a AN0 gcm-aes-128"' in (tmp_path / "psk").read_text()
    (tmp_path / "bad.json").write_text("{}")
    for args in (("decrypt", str(tmp_path / "w.pcap"), "--keys", str(tmp_path / "bad.json"),
                  "-o", str(tmp_path / "x.pcap")),
                 ("decrypt", str(tmp_path / "none.pcap"), "--keys",
                  str(tmp_path / "manifest.json"), "-o", str(tmp_path / "x.pcap"))):
        done = cli(*args)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, args
    assert not (tmp_path / "x.pcap").exists()


def test_wireshark_keys_each_sak_once() -> None:
    keys = {"links": [{"name": "l", "suite": "gcm-aes-256", "sides": {
        "a": {"keys": {"0": "AA" * 32, "1": "bb" * 32}}, "b": {"keys": {"0": "aa" * 32}}}}]}
    lines = uat_text(keys).splitlines()
    assert lines[0].startswith("#") and len(lines) == 3
    assert lines[1] == f'{"aa" * 32},"l a AN0 gcm-aes-256"'


BASE = {"name": "cap", "topology": {"planes": 1, "nodes": 4, "leaves_per_plane": 2,
                                    "spines_per_plane": 2},
        "agents": {"enabled": False}}


def test_scenario_capture_is_checked_against_the_topology() -> None:
    sc = parse({**BASE, "capture": ["p0l0e3", "n0p0r0"],
                "variants": [{"name": "a"}, {"name": "b", "capture": ["n1p0r0"]}]})
    assert [v.capture for v in sc.variants] == [("p0l0e3", "n0p0r0"), ("n1p0r0",)]
    with pytest.raises(ConfigError, match=r"^capture\[0\]: no port 'p9l0e3'"):
        parse({**BASE, "capture": ["p9l0e3"]})
    with pytest.raises(ConfigError, match=r"^variants\[0\]\.capture\[0\]: no port"):
        parse({**BASE, "variants": [{"name": "a", "capture": ["x"]}]})
    with pytest.raises(ConfigError, match=r"^capture: ports repeat"):
        parse({**BASE, "capture": ["n0p0r0", "n0p0r0"]})


def test_lab_records(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(state, "RUN_ROOT", tmp_path)
    monkeypatch.setattr(state, "run_dir", lambda run_id: tmp_path / run_id)
    (tmp_path / "abcd").mkdir()
    record = {"name": "demo", "run_id": "abcd", "kind": "fabric", "created": 0,
              "owner": {"pid": 1}, "prefix": "tbabcd",
              "hosts": {"n0": {"name": "tbabcdn0", "pid": 42, "netns": "/proc/42/ns/net",
                               "addresses": []}}}
    state.write(record)
    labs = state.all_labs()
    assert [r["name"] for r in labs] == ["demo"] and labs[0]["alive"] is False
    with pytest.raises(ConfigError, match="^LAB: lab 'demo' is dead"):
        state.find("demo")
    assert state.find("abcd", live=False)["name"] == "demo"
    with pytest.raises(ConfigError, match=r"^LAB: no lab named 'x' \(live labs: none\)"):
        state.find("x")
    assert state.host(record, "n0").argv(["true"]) == ["mnexec", "-a", "42", "true"]
    assert state.host(record, "tbabcdn0").argv(["true"])[:3] == ["mnexec", "-a", "42"]
    with pytest.raises(ConfigError, match=r"^HOST: no host 'n9' in lab 'demo' \(n0\)"):
        state.host(record, "n9")


def test_lab_commands_refuse_bad_input_in_one_line(tmp_path: Path) -> None:
    for args in (("up", "macsec"), ("up", "link-faults", "--variant", "nope"),
                 ("up", "link-faults", "--name", "Bad Name"),
                 ("up", "backbone-failover", "--traffic"),
                 ("exec", "no-such-lab", "n0", "--", "true"), ("fault", "no-such-lab", "x"),
                 ("cli", "no-such-lab"), ("down", "no-such-lab"),
                 ("capture", "no-such-lab", "n0p0r0")):
        done = cli(*args, "--results", str(tmp_path)) if args[0] == "up" else cli(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)
    assert not any(tmp_path.iterdir())


def test_tab_completes_mininet_commands_and_the_labs_nodes():
    from testbed.lab.attach import completer, completions
    words = completions({"hosts": {"n0": {}, "n1": {}}, "switches": ["p0l0", "p0s0"]})
    assert {"pingall", "iperf", "link", "n0", "p0l0"} <= set(words)
    complete = completer(words)
    assert [complete("pinga", i) for i in range(3)] == ["pingall ", "pingallfull ", None]
    assert [complete("p0", i) for i in range(3)] == ["p0l0 ", "p0s0 ", None]
    assert complete("zz", 0) is None


def test_listening_reads_the_namespace_socket_tables(tmp_path):
    import os
    import socket

    from testbed.lab.mncli import listening
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        udp.bind(("127.0.0.1", 0))
        port, uport = tcp.getsockname()[1], udp.getsockname()[1]
        assert not listening(os.getpid(), port, udp=False)  # bound, not listening yet
        tcp.listen()
        assert listening(os.getpid(), port, udp=False)
        assert listening(os.getpid(), uport, udp=True)
        assert not listening(os.getpid(), uport, udp=False)


def test_compare_shows_two_runs_side_by_side(tmp_path: Path) -> None:
    """testbed compare BEFORE AFTER: the variants both ran, figure by figure, with the
    ratio; a folder without a summary is one line and exit 2."""
    import json

    for name, p99 in (("before", 400.0), ("after", 200.0)):
        (tmp_path / name).mkdir()
        runs = [{"name": "pfc", "agents": {"chains_completed": 10, "chains_failed": 0,
                                           "latency_ms": {"p50": 50.0, "p99": p99}}},
                {"name": f"only-{name}", "agents": {"chains_completed": 1}},
                {"name": "ecmp", "agents": {"chains_completed": 9},
                 "fidelity": {"ok": name == "before"}}]
        (tmp_path / name / "summary.json").write_text(
            json.dumps({"scenario": "lossless", "runs": runs}))
    done = cli("compare", str(tmp_path / "before"), str(tmp_path / "after"))
    assert done.returncode == 0, done.stderr
    row = next(ln for ln in done.stdout.splitlines() if "chain p99" in ln)
    assert row.split()[0] == "pfc" and row.split()[-3:] == ["400.0", "200.0", "0.50"]
    assert "only-" not in done.stdout
    flagged = next(ln for ln in done.stdout.splitlines() if ln.startswith("ecmp"))
    assert flagged.split()[-4:] == ["9", "9", "(F)", "1.00"]  # the after run was flagged
    assert done.stdout.splitlines()[-1].startswith("(F): the fidelity monitor flagged")
    missing = cli("compare", str(tmp_path / "nowhere"), str(tmp_path / "after"))
    assert missing.returncode == 2
    assert missing.stderr.count("\n") == 1 and "BEFORE" in missing.stderr


def test_compare_shows_elephants_and_checkpoints(tmp_path: Path) -> None:
    """The elephants' throughput (hedera) and the cross-region checkpoints' write and lag
    times are compared too; a fraction keeps three digits."""
    import json

    for name, lag in (("before", 300.0), ("after", 330.0)):
        (tmp_path / name).mkdir()
        runs = [{"name": "nb-stride1", "elephants": {"aggregate_mbps": 157.2, "of_nics": 0.978}},
                {"name": "async", "checkpoints": {"write_ms": {"p50": 7.3, "p99": 12.2},
                                                  "lag_ms": {"p50": lag, "p99": 490.0},
                                                  "lost": 0}}]
        (tmp_path / name / "summary.json").write_text(
            json.dumps({"scenario": "x", "runs": runs}))
    done = cli("compare", str(tmp_path / "before"), str(tmp_path / "after"))
    assert done.returncode == 0, done.stderr
    rows = {" ".join(ln.split()[:-3]): ln.split()[-3:] for ln in done.stdout.splitlines()[3:]}
    assert rows["nb-stride1 elephants/NICs"] == ["0.978", "0.978", "1.00"]
    assert rows["nb-stride1 elephants Mb/s"] == ["157.2", "157.2", "1.00"]
    assert rows["async ckpt lag p50 ms"] == ["300.0", "330.0", "1.10"]
    assert rows["async ckpt write p99 ms"] == ["12.2", "12.2", "1.00"]
    assert rows["async ckpts lost"] == ["0", "0", "-"]


def test_each_lab_kind_answers_the_lab_commands_from_its_record(tmp_path: Path) -> None:
    """What differs between kinds in ``testbed up/inspect/cli/capture`` is the lab class's:
    the commands name no kind."""
    from testbed.lab import commands
    from testbed.lab.backbone_lab import BackboneLab
    from testbed.lab.client import lab_class
    from testbed.lab.fabric_lab import FabricLab

    spec = small_spec()
    spec.to_json(tmp_path / "spec.json")
    fabric = {"name": "f", "kind": "fabric", "prefix": "tb0000",
              "spec": str(tmp_path / "spec.json"),
              "hosts": {"n0": {"name": "tb0000n0", "pid": 42, "netns": "/proc/42/ns/net",
                               "addresses": ["p0r0 10.0.0.1/24"]}}}
    backbone = {"name": "b", "kind": "backbone", "prefix": "tb0000",
                "hosts": {"nyc": {"name": "tb0000nyc", "netns": "tb0000nyc", "role": "pop",
                                  "vty": "/run/x/nyc", "addresses": ["lo 10.255.0.1/32"]},
                          "lon": {"name": "tb0000lon", "netns": "tb0000lon", "role": "pop",
                                  "vty": "/run/x/lon", "addresses": []}},
                "links": {"nyc-lon-1": {"a": "nyc", "b": "lon", "wire_a": "tb0000w1a",
                                        "wire_b": "tb0000w1b"}}}
    assert lab_class(fabric) is FabricLab and lab_class(backbone) is BackboneLab

    # what inspect prints after the nodes, and --json adds
    lines = FabricLab.inspect_lines(fabric)
    assert lines[0].startswith("switches") and len(lines) == 1 + len(spec.switches)
    assert FabricLab.inspect_json(fabric)["spec"]["prefix"] == "tb0000"
    assert BackboneLab.inspect_lines(backbone) == [
        "links:", "  nyc-lon-1     nyc - lon  (wires tb0000w1a, tb0000w1b)"]
    assert BackboneLab.inspect_json(backbone) == {}

    # cli: Mininet's through the supervisor (no node), a router's vtysh (one node)
    assert FabricLab.cli_argv(fabric, None, None) is None
    with pytest.raises(ConfigError, match="^NODE: a fabric lab has one CLI"):
        FabricLab.cli_argv(fabric, "n0", None)
    assert BackboneLab.cli_argv(backbone, "nyc", "show ip route") == [
        "ip", "netns", "exec", "tb0000nyc", "vtysh", "--vty_socket", "/run/x/nyc",
        "-c", "show ip route"]
    with pytest.raises(ConfigError, match="^ROUTER: name a router of b: nyc, lon"):
        BackboneLab.cli_argv(backbone, None, None)
    with pytest.raises(ConfigError, match="^HOST: no host 'sfo'"):
        BackboneLab.cli_argv(backbone, "sfo", None)

    # capture: a fabric port by its short name, a backbone link's end
    host, ifname, short = FabricLab.capture_target(fabric, "n0p0r0")
    assert (host.argv(["true"])[:3], ifname, short) == (["mnexec", "-a", "42"],
                                                         "tb0000n0p0r0", "n0p0r0")
    host, ifname, short = BackboneLab.capture_target(backbone, "nyc-lon-1:b")
    assert (host.argv(["true"])[:4], ifname, short) == (
        ["ip", "netns", "exec", "tb0000lon"], "tb0000w1b", "nyc-lon-1-b")
    with pytest.raises(ConfigError, match="^PORT: no link 'nyc-lon-1:c'"):
        BackboneLab.capture_target(backbone, "nyc-lon-1:c")
    inspected = "\n".join(commands.inspect_lines(
        {**backbone, "run_id": "0000", "scenario": "s", "variant": "v", "alive": True,
         "created": 0, "out": "/tmp/x", "size": {"routers": 2}}))
    assert "\nrouters:\n  nyc       lo 10.255.0.1/32 [pop]\n  lon        [pop]\nlinks:" in inspected
    long_name = {**backbone, "hosts": {**backbone["hosts"], "ap-southeast-2": {
        "netns": "x", "addresses": ["lo 10.255.1.9/32"]}}}
    assert "  ap-southeast-2  lo 10.255.1.9/32" in "\n".join(commands.inspect_lines(
        {**long_name, "run_id": "0000", "scenario": "s", "variant": "v", "alive": True,
         "created": 0, "out": "/tmp/x", "size": {"routers": 3}}))
