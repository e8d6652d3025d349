"""A lab over two machines (``make cluster-test``: two lab VMs, the second a server the
first reaches over ssh; TESTBED_SERVERS names it): the default scenario's fabric placed
over both by leaf group, its cut links in GRE, its controller here reached through ssh;
hosts on either machine reach each other on every plane, ``testbed exec`` enters a host
on the server, a TCP flow across the tunnels gets the link's rate; ``down`` leaves
nothing on either machine, nor does a lab whose supervisor was killed (its part on the
server tears itself down, ``clean`` removes the rest here); a server that cannot hold
its part is refused before anything is made, in one line that names it."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.cluster.servers import parse_all
from testbed.host.procs import wait_for

SERVERS = os.environ.get("TESTBED_SERVERS", "")
pytestmark = [pytest.mark.ovs, pytest.mark.skipif(
    not SERVERS, reason="needs a second machine: make cluster-test (TESTBED_SERVERS)")]

REPO = Path(__file__).resolve().parents[2]
SCENARIO = "agents-vs-training"


def run_testbed(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.core.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def on_server(command: str, timeout: float = 60) -> subprocess.CompletedProcess:
    server = parse_all(SERVERS)[0]
    return subprocess.run(["ssh", "-o", "BatchMode=yes", server.dest, command],
                          capture_output=True, text=True, timeout=timeout)


def leftovers_here(prefix: str) -> list[str]:
    return _leftovers(lambda c: subprocess.run(["sh", "-c", c], capture_output=True,
                                               text=True), prefix)


def leftovers_there(prefix: str) -> list[str]:
    return _leftovers(on_server, prefix)


def _leftovers(run, prefix: str) -> list[str]:
    """Interfaces, namespaces, bridges, processes and the run folder of a run."""
    found = []
    links = run("ip -o link").stdout
    found += [m for m in re.findall(r"^\d+: ([^:@]+)", links, re.M) if m.startswith(prefix)]
    found += [b for b in run("ovs-vsctl list-br").stdout.split() if b.startswith(prefix)]
    found += [p for p in run("ps -eo args").stdout.splitlines()
              if f"mininet:{prefix}" in p or "testbed.cluster.remote part" in p]
    if run(f"test -e /run/testbed/{prefix[2:]} && echo yes").stdout.strip():
        found.append(f"/run/testbed/{prefix[2:]}")
    return found


def up(name: str, tmp_path: Path, *extra: str) -> dict:
    done = run_testbed("up", SCENARIO, "--name", name, "--servers", SERVERS, "--results",
                       str(tmp_path), *extra)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(run_testbed("ls", "--json").stdout)


def record_of(name: str) -> dict:
    labs = json.loads(run_testbed("ls", "--json").stdout)
    return next(r for r in labs if r["name"] == name)


def test_a_lab_spreads_over_two_machines_and_leaves_nothing(tmp_path):
    up("duo", tmp_path)
    record = record_of("duo")
    prefix = record["prefix"]
    try:
        hosts = record["hosts"]
        there = sorted(n for n, h in hosts.items() if h.get("server"))
        here = sorted(n for n, h in hosts.items() if not h.get("server"))
        # by leaf group: each machine a leaf of every plane, its four nodes, a spine a plane
        assert len(there) == len(here) == 4, hosts
        placement = json.loads((Path(record["spec"]).parent / "placement.json").read_text())
        assert placement["way"] == "group" and len(placement["cut_links"]) == 4
        bridges = on_server("ovs-vsctl list-br").stdout.split()
        assert len([b for b in bridges if b.startswith(prefix)]) == 4, bridges
        tunnels = on_server("ip -d -o link show type gretap").stdout
        assert tunnels.count(prefix) == 4, tunnels  # an end of every cut link there

        # every host reaches every other on every plane, across the tunnels too
        spec = json.loads(Path(record["spec"]).read_text())
        addresses = " ".join(i["ip"] for h in spec["hosts"] for i in h["interfaces"])
        for src in (here[0], there[0]):  # one shell a source: a command costs seconds here
            ping = run_testbed("exec", "duo", src, "--", "sh", "-c",
                               f"for ip in {addresses}; do ping -c1 -W2 $ip >/dev/null "
                               "|| { echo unreachable $ip; exit 1; }; done", timeout=120)
            assert ping.returncode == 0, (src, ping.stdout, ping.stderr)

        # a full-size frame crosses the tunnels unfragmented (the fabric's MTU end to end)
        dst = there[-1]
        dst_ip = next(h for h in spec["hosts"] if h["name"] == prefix + dst)[
            "interfaces"][0]["ip"]
        jumbo = run_testbed("exec", "duo", here[0], "--", "ping", "-c1", "-W3", "-M", "do",
                            "-s", str(spec["mtu"] - 28), dst_ip, timeout=60)
        assert jumbo.returncode == 0, jumbo.stdout + jumbo.stderr

        # a TCP flow from a host here to one there gets most of the link's 20 Mb/s
        server = subprocess.Popen(
            [sys.executable, "-m", "testbed.core.cli", "exec", "duo", dst, "--", "iperf3",
             "-s", "-1", "-B", dst_ip], cwd=REPO, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE)
        try:
            assert wait_for(lambda: ":5201 " in run_testbed(
                "exec", "duo", dst, "--", "ss", "-Hltn").stdout, 60), "no iperf3 server"
            flow = run_testbed("exec", "duo", here[0], "--", "iperf3", "-c", dst_ip, "-t",
                               "5", "-J", timeout=60)
            end = json.loads(flow.stdout or "{}").get("end", {})
            assert flow.returncode == 0 and "sum_received" in end, (
                flow.stdout[-1500:] + flow.stderr[-800:])
            mbps = end["sum_received"]["bits_per_second"] / 1e6
            assert 14 <= mbps <= 21, mbps
        finally:
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                raise
    finally:
        down = run_testbed("down", "duo")
    assert down.returncode == 0, down.stderr
    assert leftovers_here(prefix) == []
    assert wait_for(lambda: not leftovers_there(prefix), 30), leftovers_there(prefix)


def test_a_killed_lab_leaves_nothing_on_the_server(tmp_path):
    up("crash", tmp_path)
    record = record_of("crash")
    prefix = record["prefix"]
    os.kill(record["owner"]["pid"], signal.SIGKILL)
    # the server's part loses its ssh session and tears itself down
    assert wait_for(lambda: not leftovers_there(prefix), 120), leftovers_there(prefix)
    clean = run_testbed("clean", "--run", prefix[2:])
    assert clean.returncode == 0, clean.stderr
    assert leftovers_here(prefix) == []


def test_a_server_without_gre_gets_vxlan_tunnels(tmp_path):
    """The kernel there refuses GRE (its module blocked): the machines agree on VXLAN, and
    full-size frames cross it both ways."""
    block = "/etc/modprobe.d/testbed-test-no-gre.conf"
    assert on_server(f"echo 'install ip_gre /bin/false' > {block}; "
                     "rmmod ip_gre 2>/dev/null; true").returncode == 0
    try:
        up("vx", tmp_path)
        record = record_of("vx")
        prefix = record["prefix"]
        try:
            placement = json.loads((Path(record["spec"]).parent / "placement.json").read_text())
            assert placement["tunnel"] == "vxlan", placement
            assert on_server("ip -d -o link show type vxlan").stdout.count(prefix) == 4
            spec = json.loads(Path(record["spec"]).read_text())
            hosts = record["hosts"]
            there = next(n for n, h in hosts.items() if h.get("server"))
            here = next(n for n, h in hosts.items() if not h.get("server"))
            ip = {n: next(h for h in spec["hosts"] if h["name"] == prefix + n)[
                "interfaces"][-1]["ip"] for n in (here, there)}
            for src, dst in ((here, there), (there, here)):
                ping = run_testbed("exec", "vx", src, "--", "ping", "-c1", "-W3", "-M", "do",
                                   "-s", str(spec["mtu"] - 28), ip[dst], timeout=60)
                assert ping.returncode == 0, (src, dst, ping.stdout, ping.stderr)
        finally:
            down = run_testbed("down", "vx")
        assert down.returncode == 0, down.stderr
        assert leftovers_here(prefix) == []
        assert wait_for(lambda: not leftovers_there(prefix), 30), leftovers_there(prefix)
    finally:
        on_server(f"rm -f {block}")


def test_a_server_that_cannot_hold_its_part_is_refused_before_anything_is_made(tmp_path):
    before = set(os.listdir("/run/testbed")) if os.path.isdir("/run/testbed") else set()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    nobody = run_testbed("up", SCENARIO, "--name", "ghost", "--servers", "root@10.99.0.77",
                         "--results", str(tmp_path))
    assert nobody.returncode == 1
    assert nobody.stderr.strip().splitlines()[-1].startswith(
        "testbed: lab ghost did not come up: server root@10.99.0.77: ssh"), nobody.stderr
    dev = on_server("ip -j route get 10.99.0.1").stdout
    dev = json.loads(dev)[0]["dev"]
    assert on_server(f"ip link set {dev} mtu 1500").returncode == 0
    try:
        small = run_testbed("up", SCENARIO, "--name", "small", "--servers", SERVERS,
                            "--results", str(tmp_path))
    finally:
        on_server(f"ip link set {dev} mtu 9100")
    assert small.returncode == 1
    assert "MTU 1500" in small.stderr and "9042" in small.stderr, small.stderr
    after = set(os.listdir("/run/testbed")) if os.path.isdir("/run/testbed") else set()
    assert after <= before
    assert subprocess.run(["ip", "-o", "link"], capture_output=True,
                          text=True).stdout.count("\n") == links.count("\n")


#: the two-machine run beside the one-machine run, fixed before the first comparison:
#: under qemu's software emulation every instruction costs tens of times what it costs
#: on hardware, each VM has one virtual processor (a machine is one of the host's two
#: cores, in both runs) and shares it with qemu's own threads, so timing figures move by
#: tens of percent from run to run; what must hold regardless is that every chain
#: completes on both
LATENCY_FACTOR = 2.0  # median chain latency, either way
GOODPUT_SHARE = 0.5  # training goodput, either way
COMPARED = ("agents-only", "training-1to1")


def test_the_default_scenario_over_two_machines_compares_with_one(tmp_path):
    import yaml

    source = yaml.safe_load((REPO / "scenarios" / f"{SCENARIO}.yaml").read_text())
    source["variants"] = [v for v in source["variants"] if v["name"] in COMPARED]
    source.update(duration_s=15, seeds=[7])
    scenario = tmp_path / "compared.yaml"
    scenario.write_text(yaml.safe_dump(source))
    runs = {}
    for label, extra in (("one", ()), ("two", ("--servers", SERVERS))):
        out = tmp_path / label
        done = run_testbed("run", str(scenario), "--out", str(out), *extra, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        runs[label] = {r["name"]: r for r in json.loads((out / "summary.json").read_text())[
            "runs"]}
    for run in runs["two"].values():  # each variant's part went with it
        assert leftovers_there("tb" + run["run_id"]) == []
    lines = []
    for name in COMPARED:  # the figures first, kept whatever the checks find
        one, two = runs["one"][name], runs["two"][name]
        lines.append(f"{name}: chains completed {one['agents']['chains_completed']} / "
                     f"{two['agents']['chains_completed']}, failed "
                     f"{one['agents']['chains_failed']} / {two['agents']['chains_failed']}, "
                     f"p50 {one['agents']['latency_ms']['p50']} / "
                     f"{two['agents']['latency_ms']['p50']} ms, p99 "
                     f"{one['agents']['latency_ms']['p99']} / "
                     f"{two['agents']['latency_ms']['p99']} ms, training "
                     f"{one['training']['goodput_mbps']} / {two['training']['goodput_mbps']} "
                     f"Mb/s, fidelity {one.get('fidelity', {}).get('ok')} / "
                     f"{two.get('fidelity', {}).get('ok')}")
    print("\n".join(lines))
    if os.environ.get("VM_OUT"):  # the lab VM's results folder, brought back to the host
        Path(os.environ["VM_OUT"], "cluster-compare.txt").write_text("\n".join(lines) + "\n")
        for label in runs:
            shutil.copy(tmp_path / label / "summary.json",
                        Path(os.environ["VM_OUT"], f"summary-{label}.json"))
    for name in COMPARED:
        one, two = runs["one"][name], runs["two"][name]
        assert two["placement"]["way"] == "group" and "placement" not in one
        # the server's own monitor sampled it through the window, judged sample by sample
        server, = two["servers"]
        assert server["fidelity"]["samples"] >= 5 and "servers" not in one
        for run in (one, two):
            agents = run["agents"]
            assert agents["chains_started"] > 0 and agents["chains_failed"] == 0, (name, agents)
        p50 = [r["agents"]["latency_ms"]["p50"] for r in (one, two)]
        assert 1 / LATENCY_FACTOR <= p50[1] / p50[0] <= LATENCY_FACTOR, (name, p50)
        if one["training"]["iterations"]:
            goodput = [r["training"]["goodput_mbps"] for r in (one, two)]
            assert two["training"]["iterations"] > 0, two["training"]
            assert abs(goodput[1] / goodput[0] - 1) <= GOODPUT_SHARE, (name, goodput)
