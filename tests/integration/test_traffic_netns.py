"""Root integration tests for traffic: ring all-reduce and replay inside throwaway namespaces.

Every namespace and interface created here is named ``tbt<random>...`` and is
removed in fixture teardown, even when a test fails; the last test checks
that nothing named ``tbt*`` is left behind.
"""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from traffic.pcapfile import read_frames, write_pcap

REPO = Path(__file__).resolve().parents[1]
OFFLOADS = ["tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro", "off"]


def sh(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, check=check, capture_output=True, text=True)


def ns_sh(ns: str, *cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return sh("ip", "netns", "exec", ns, *cmd, check=check)


def tag() -> str:
    """A random 'tbt' + 6 hex prefix; names built on it stay within 15 characters."""
    return "tbt" + secrets.token_hex(3)


class Lab:
    """Namespaces and links made by a test; ``destroy`` removes them all."""

    def __init__(self) -> None:
        self.prefix = tag()
        self.namespaces: list[str] = []

    def netns(self, suffix: str) -> str:
        name = self.prefix + suffix
        sh("ip", "netns", "add", name)
        self.namespaces.append(name)
        ns_sh(name, "ip", "link", "set", "lo", "up")
        ns_sh(name, "sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1")
        ns_sh(name, "sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1")
        return name

    def veth(self, ns_a: str, name_a: str, ns_b: str, name_b: str) -> None:
        """Create a veth pair directly inside two namespaces, up, offloads off."""
        sh("ip", "link", "add", name_a, "netns", ns_a, "type", "veth",
           "peer", "name", name_b, "netns", ns_b)
        for ns, dev in ((ns_a, name_a), (ns_b, name_b)):
            ns_sh(ns, "sysctl", "-qw", f"net.ipv6.conf.{dev}.disable_ipv6=1", check=False)
            ns_sh(ns, "ethtool", "-K", dev, *OFFLOADS)
            ns_sh(ns, "ip", "link", "set", dev, "up")
        for ns, dev in ((ns_a, name_a), (ns_b, name_b)):
            wait_carrier(ns, dev)

    def destroy(self) -> None:
        # Deleting a namespace deletes the veths inside it (and so their peers).
        for ns in self.namespaces:
            sh("ip", "netns", "del", ns, check=False)


@pytest.fixture
def lab() -> Iterator[Lab]:
    lab = Lab()
    try:
        yield lab
    finally:
        lab.destroy()


def wait_carrier(ns: str, dev: str, timeout: float = 5.0) -> None:
    """Wait until ``dev`` reports carrier; frames sent before that are dropped."""
    deadline = time.monotonic() + timeout
    path = f"/sys/class/net/{dev}/carrier"
    while time.monotonic() < deadline:
        if ns_sh(ns, "cat", path, check=False).stdout.strip() == "1":
            return
        time.sleep(0.05)
    raise TimeoutError(f"{dev} in {ns} has no carrier after {timeout} s")


def mac_of(ns: str, dev: str) -> str:
    return json.loads(ns_sh(ns, "ip", "-j", "link", "show", dev).stdout)[0]["address"]


def traffic_cmd(ns: str, *args: str) -> list[str]:
    return ["ip", "netns", "exec", ns, sys.executable, "-m", "traffic", *args]


def child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO)}


def bridged_ranks(lab: Lab, n: int, planes: int) -> tuple[str, list[str], list[dict]]:
    """``n`` hosts, each with one NIC per plane on that plane's bridge in a switch
    namespace: the switch, the hosts and the ranks' channels of a training config."""
    switch = lab.netns("s")
    hosts = [lab.netns(f"h{r}") for r in range(n)]
    for k in range(planes):
        ns_sh(switch, "ip", "link", "add", f"br{k}", "type", "bridge")
        ns_sh(switch, "ip", "link", "set", f"br{k}", "up")
    ranks = []
    for r, host in enumerate(hosts):
        channels = []
        for k in range(planes):
            dev, port = f"e{k}", f"p{r}e{k}"
            lab.veth(host, dev, switch, port)
            ns_sh(switch, "ip", "link", "set", port, "master", f"br{k}")
            ip = f"10.77.{k}.{r + 1}"
            ns_sh(host, "ip", "addr", "add", f"{ip}/24", "dev", dev)
            channels.append({"iface": dev, "ip": ip, "mac": mac_of(host, dev)})
        ranks.append({"channels": channels})
    return switch, hosts, ranks


def run_ranks(hosts: list[str], cfg_path: Path, tmp_path: Path,
              args: Callable[[int], list[str]], timeout: float = 30
              ) -> tuple[list[int], list[tuple[str, str]]]:
    """One training rank in each host (``args(rank)`` added to its command line), run to
    the end: their exit codes and (stdout, stderr); none is left running."""
    procs = [
        subprocess.Popen(
            traffic_cmd(host, "training", "--rank", str(r), "--config", str(cfg_path),
                        "--out", str(tmp_path / f"rank{r}.jsonl"), *args(r)),
            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r, host in enumerate(hosts)
    ]
    try:
        outs = [p.communicate(timeout=timeout) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    return [p.returncode for p in procs], outs


@pytest.mark.root
@pytest.mark.parametrize("qps", [1, 4])
def test_ring_allreduce_three_ranks_two_planes(lab: Lab, tmp_path: Path, qps: int) -> None:
    """3 ranks, 2 channels each (one bridge per plane): every byte arrives, nothing lost;
    with 4 queue pairs a channel's packets leave from 4 UDP source ports, round-robin."""
    n, planes = 3, 2
    switch, hosts, ranks = bridged_ranks(lab, n, planes)
    cfg = {"bytes": 600_000, "compute_ms": 10, "rate_mbps": 60, "step_timeout_ms": 1000,
           "payload": 1000, "ranks": ranks, "qps": qps}
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    iterations = 3
    start_at = time.time() + 2.0
    pcap = tmp_path / "p0e0.pcap"  # rank 0's plane-0 NIC, at the switch
    dump = subprocess.Popen(["ip", "netns", "exec", switch, "tcpdump", "-i", "p0e0", "-w",
                             str(pcap), "-U", "-s", "64", "udp dst port 4791"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)
    try:
        codes, outs = run_ranks(hosts, cfg_path, tmp_path, lambda r: [
            "--iterations", str(iterations), "--start-at", str(start_at)], timeout=60)
    finally:
        time.sleep(0.5)
        dump.terminate()
        dump.wait(10)
    sent = [f for f in read_frames(pcap) if f[26:30] == bytes([10, 77, 0, 1])]  # from rank 0
    sports = [int.from_bytes(f[34:36], "big") for f in sent]
    assert len(set(sports)) == qps, sorted(set(sports))
    assert sports[:2 * qps] == sports[:qps] * 2  # round-robin over the QPs
    expected = 2 * (n - 1) * (cfg["bytes"] // n)
    for r, (stdout, stderr) in enumerate(outs):
        assert codes[r] == 0, stderr
        summary = json.loads(stdout)
        assert summary["iterations"] == iterations
        lines = [json.loads(x) for x in (tmp_path / f"rank{r}.jsonl").read_text().splitlines()]
        assert [x["iteration"] for x in lines] == list(range(iterations))
        for line in lines:
            assert line["rank"] == r
            assert line["bytes_received"] == expected, line
            assert line["bytes_sent"] == expected, line
            assert line["packets_lost"] == 0, line
            assert line["timeouts"] == 0, line
            assert line["icrc_errors"] == 0, line
            assert line["complete"] is True
            assert line["comm_ms"] > 0 and line["compute_ms"] >= 9


@pytest.mark.root
@pytest.mark.parametrize("leader_s, others_s", [(2.0, 1.0), (1.0, 30.0)])
def test_a_timed_ring_ends_on_the_same_iteration_everywhere(lab: Lab, tmp_path: Path,
                                                            leader_s: float,
                                                            others_s: float) -> None:
    """Ranks that read the end of a timed run each from the clock disagree when it falls
    between their iterations' ends: the ones that start one more iteration time out on
    data that never comes. Here the ranks are given different ends on purpose: rank 0
    (the ring's leader) ends the run for all, at its own end, with no step timed out."""
    n = 4
    _, hosts, ranks = bridged_ranks(lab, n, 1)
    cfg = {"bytes": 200_000, "compute_ms": 20, "rate_mbps": 100, "step_timeout_ms": 300,
           "payload": 1000, "ranks": ranks}
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    start_at = time.time() + 1.5
    codes, outs = run_ranks(hosts, cfg_path, tmp_path, lambda r: [
        "--start-at", str(start_at), "--duration", str(leader_s if r == 0 else others_s)])
    ended = time.time() - start_at
    lines = []
    for r, (stdout, stderr) in enumerate(outs):
        assert codes[r] == 0, stderr
        assert json.loads(stdout)["timeouts"] == 0, stdout
        lines.append([json.loads(x) for x in (tmp_path / f"rank{r}.jsonl").read_text()
                      .splitlines()])
    iterations = [[x["iteration"] for x in rank] for rank in lines]
    assert iterations[0] and all(its == iterations[0] for its in iterations), iterations
    assert all(x["complete"] and x["packets_lost"] == 0 for rank in lines for x in rank)
    assert leader_s <= ended < leader_s + 3, ended  # the leader's end, not the others'


@pytest.mark.root
def test_a_timed_ring_whose_leader_is_gone_still_ends(lab: Lab, tmp_path: Path) -> None:
    """No end-of-run message comes when the leader dies: the others stop by themselves,
    past the end (not at the runner's SIGTERM). Rank 1 receives from the dead leader, so
    its last iteration timed out; rank 2 receives from rank 1, which still sends after
    each time-out, about as late as rank 2's own step time-out: whether rank 2 timed out
    too is a race of two 200 ms clocks (both ways seen on one host), so it is not
    asserted."""
    _, hosts, ranks = bridged_ranks(lab, 3, 1)
    cfg = {"bytes": 60_000, "compute_ms": 20, "rate_mbps": 100, "step_timeout_ms": 200,
           "payload": 1000, "ranks": ranks}
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    start_at = time.time() + 1.5
    procs = [
        subprocess.Popen(
            traffic_cmd(host, "training", "--rank", str(r), "--config", str(cfg_path),
                        "--out", str(tmp_path / f"rank{r}.jsonl"), "--start-at",
                        str(start_at), "--duration", "1.5"),
            env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for r, host in enumerate(hosts)
    ]
    try:
        time.sleep(start_at + 0.5 - time.time())
        procs[0].kill()  # the leader, mid-run: it sends nothing more
        for p in procs[1:]:
            p.wait(timeout=10)  # without the fallback they would wait for a message
        ended = time.time() - start_at
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.communicate()
    assert [p.returncode for p in procs[1:]] == [0, 0]
    assert 1.5 <= ended < 5, ended
    last = {r: json.loads((tmp_path / f"rank{r}.jsonl").read_text().splitlines()[-1])
            for r in (1, 2)}
    assert last[1]["timeouts"] > 0, last[1]
    assert all(x["end"] >= start_at + 1.5 for x in last.values()), last


@pytest.mark.root
def test_training_sigterm_writes_whole_lines(lab: Lab, tmp_path: Path) -> None:
    """A lone rank (peer missing) gets SIGTERM mid-run: exit 0 and only complete JSON lines."""
    a, b = lab.netns("a"), lab.netns("b")
    lab.veth(a, "e0", b, "e0")
    ns_sh(a, "ip", "addr", "add", "10.78.0.1/24", "dev", "e0")
    ns_sh(b, "ip", "addr", "add", "10.78.0.2/24", "dev", "e0")
    ranks = [{"channels": [{"iface": "e0", "ip": f"10.78.0.{i + 1}",
                            "mac": mac_of(ns, "e0")}]} for i, ns in enumerate((a, b))]
    cfg = {"bytes": 200_000, "compute_ms": 5, "rate_mbps": 50, "step_timeout_ms": 100,
           "payload": 1000, "ranks": ranks}
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(json.dumps(cfg))
    out = tmp_path / "rank0.jsonl"
    proc = subprocess.Popen(
        traffic_cmd(a, "training", "--rank", "0", "--config", str(cfg_path), "--out", str(out),
                    "--duration", "30"),
        env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(2.0)
        proc.terminate()
        stdout, stderr = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, stderr
    summary = json.loads(stdout)
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert summary["iterations"] == len(lines) >= 1
    complete = [x for x in lines if x["complete"]]
    assert complete and all(x["timeouts"] == 2 and x["packets_lost"] > 0 for x in complete)
    for x in complete:  # each hurt step with when it began, inside its iteration
        assert [h[2] for h in x["hurt_steps"]] == [1, 1]
        assert sum(h[1] for h in x["hurt_steps"]) == x["packets_lost"]
        assert all(x["start"] <= h[0] <= x["end"] for h in x["hurt_steps"])


@pytest.mark.root
def test_replay_delivers_every_frame(lab: Lab, tmp_path: Path) -> None:
    """Replay a pcap 3 times over a veth; tcpdump on the peer sees frames*loops packets."""
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether
    from scapy.packet import Raw

    a, b = lab.netns("a"), lab.netns("b")
    lab.veth(a, "e0", b, "e0")
    dst = mac_of(b, "e0")
    frames = [
        bytes(Ether(src="02:00:00:00:00:01", dst=dst) / IP(src="10.79.0.1", dst="10.79.0.2")
              / UDP(sport=1000 + i, dport=9999) / Raw(bytes(size - 42)))
        for i, size in enumerate(range(64, 1500, 29))
    ]
    pcap = tmp_path / "in.pcap"
    write_pcap(pcap, frames)
    cap = tmp_path / "cap.pcap"
    dump = subprocess.Popen(
        ["ip", "netns", "exec", b, "tcpdump", "-Z", "root", "--immediate-mode", "-n", "-U",
         "-i", "e0", "-w", str(cap), "udp", "dst", "port", "9999"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert dump.stderr is not None
        assert "listening on" in dump.stderr.readline()
        loops = 3
        res = subprocess.run(
            traffic_cmd(a, "replay", "--iface", "e0", "--pcap", str(pcap), "--loop", str(loops),
                        "--pps", "20000"),
            env=child_env(), capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        result = json.loads(res.stdout)
        assert result["packets"] == len(frames) * loops
        assert result["bytes"] == sum(map(len, frames)) * loops
        assert result["loops"] == loops
        time.sleep(1.0)
    finally:
        dump.terminate()
        _, dump_err = dump.communicate(timeout=10)
    captured = read_frames(cap)
    assert len(captured) == len(frames) * loops, dump_err
    assert captured[: len(frames)] == frames


@pytest.mark.root
def test_zz_nothing_left_behind() -> None:
    """Runs last in this module: no tbt* namespace or interface may remain."""
    namespaces = sh("ip", "netns", "list").stdout.split()
    assert not [n for n in namespaces if n.startswith("tbt")]
    links = json.loads(sh("ip", "-j", "link", "show").stdout)
    assert not [x["ifname"] for x in links if x["ifname"].startswith("tbt")]
