"""A real fabric: Mininet hosts, userspace (or kernel) OVS, os-ken controller, real packets."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

import pytest

from testbed.host.procs import wait_for

pytestmark = [pytest.mark.ovs, pytest.mark.vm]


def test_every_host_pair_reaches_on_every_plane(live):
    spec = live.spec
    failures = []
    for plane in range(spec.planes):
        for a in spec.hosts:
            for b in spec.hosts:
                if a is not b and not live.fabric.ping(a.name, b.interface(plane, 0).ip,
                                                       count=1, wait_s=2):
                    failures.append((a.name, b.name, plane))
    assert failures == []


def test_hosts_are_configured_as_the_spec_says(live):
    """Each host namespace as bring-up set it over netlink: its interfaces' address, MTU
    and shaping, offloads off on the userspace datapath, and no IPv6 at all."""
    spec = live.spec
    for host in spec.hosts:
        links = json.loads(live.fabric.run(host.name, ["ip", "-j", "addr"]).stdout)
        by_name = {lk["ifname"]: lk for lk in links}
        for intf in host.interfaces:
            link = by_name[intf.name]
            assert link["mtu"] == spec.mtu and "UP" in link["flags"]
            assert [(a["family"], a["local"], a["prefixlen"]) for a in link["addr_info"]] \
                == [("inet", intf.ip, intf.prefixlen)]  # no IPv6 address, not even fe80::
            qdiscs = json.loads(live.fabric.run(
                host.name, ["tc", "-j", "qdisc", "show", "dev", intf.name]).stdout)
            if live.fabric.caps.htb:  # shaped like the switch ports: HTB over the buffer
                assert [q["kind"] for q in qdiscs] == ["htb", "bfifo"]
                # the ceiling's bucket as deep as the rate's: a timer that fires late
                # keeps its tokens, and the link its rate
                shown = live.fabric.run(host.name, ["tc", "class", "show", "dev",
                                                    intf.name]).stdout
                burst, cburst = re.search(r" burst (\d+)b cburst (\d+)b", shown).groups()
                assert burst == cburst and int(burst) >= 2 * spec.mtu, shown
            if live.fabric.caps.ovs_datapath == "user":
                features = live.fabric.run(host.name, ["ethtool", "-k", intf.name]).stdout
                for name in ("tx-checksumming", "scatter-gather", "tcp-segmentation-offload",
                             "generic-segmentation-offload", "generic-receive-offload"):
                    assert f"{name}: off" in features, (host.name, intf.name, name)
        sysctl = live.fabric.run(host.name, ["sysctl", "-n", "net.ipv6.conf.all.disable_ipv6",
                                             "net.ipv6.conf.default.disable_ipv6"])
        assert sysctl.stdout.split() == ["1", "1"], host.name


def ofctl(*argv: str) -> str:
    return subprocess.run(["timeout", "10", "ovs-ofctl", "-O", "OpenFlow13", *argv],
                          capture_output=True, text=True, check=True).stdout


def test_leaves_hash_remote_traffic_over_every_uplink(live):
    for sw in live.spec.switches:
        flows = ofctl("dump-flows", sw.name)
        if sw.role == "leaf":
            members = ",".join(map(str, live.spec.uplink_ports(sw.name)))
            assert f"bundle(symmetric_l3l4+udp,0,hrw,ofport,members:{members})" in flows
        else:
            assert "bundle(" not in flows
        assert "type=select" not in ofctl("dump-groups", sw.name)


def uplink_tx(live, leaf: str) -> dict[int, int]:
    """Packets sent so far out of each uplink of ``leaf`` (OpenFlow port stats)."""
    out = {}
    for port in live.spec.uplink_ports(leaf):
        stats = ofctl("dump-ports", leaf, str(port))
        out[port] = int(stats.split("tx pkts=")[1].split(",")[0])
    return out


def test_roce_queue_pairs_of_one_host_pair_spread_over_the_uplinks(live):
    """RoCEv2's entropy is the UDP source port: 32 queue pairs between the same two hosts
    must not all take one uplink (OVS's default select-group hash leaves UDP ports out
    and put every one of them on the same uplink; see controllers/ecmp.py)."""
    spec = live.spec
    a, b = spec.hosts[0], spec.hosts[-1]  # different leaves
    leaf = a.interface(0, 0).switch
    # paced below the link rate: 320 frames sent at once (77 kB) overflow the host NIC's
    # 64 kB queue at 50 Mb/s and the tail drop would be counted as a missing packet
    sender = (
        "import socket, time\n"
        "for sport in range(49152, 49184):\n"
        "    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        f"    s.bind(('{a.interface(0, 0).ip}', sport))\n"
        "    for _ in range(10):\n"
        f"        s.sendto(bytes(200), ('{b.interface(0, 0).ip}', 4791))\n"
        "    s.close()\n"
        "    time.sleep(0.002)\n")
    before = uplink_tx(live, leaf)
    done = live.fabric.run(a.name, [sys.executable, "-c", sender])
    assert done.returncode == 0, done.stderr
    assert wait_for(lambda: sum(uplink_tx(live, leaf).values()) - sum(before.values())
                    >= 320, 5)
    after = uplink_tx(live, leaf)
    sent = {port: after[port] - before[port] for port in after}
    # 320 packets (and a little control traffic): each of the two uplinks carries a share
    assert min(sent.values()) >= 0.2 * 320, sent


def test_links_are_shaped_to_their_rate(live):
    spec = live.spec
    a, b = spec.hosts[0], spec.hosts[-1]  # different leaves: crosses a spine
    server = live.fabric.spawn(b.name, "iperf-s", ["iperf3", "-s", "-1"],
                               pid_dir=live.pid_dir)
    try:
        wait_for(lambda: live.fabric.run(b.name, ["ss", "-ltn", "sport = :5201"]).stdout
                 .count("LISTEN") > 0, 5)
        done = live.fabric.run(a.name, ["iperf3", "-c", b.interface(0, 0).ip, "-t", "3", "-J"],
                               timeout=20)
        mbps = json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
    finally:
        server.stop()
    assert 0.7 * spec.link_mbps < mbps < 1.05 * spec.link_mbps


def test_an_agent_chain_completes(live, tmp_path):
    from testbed.workloads.generators import SERVICE_PORT, agent_plan

    spec = live.spec
    services = {"retriever": 1, "tool": 2, "model": 3, "agent": 3}
    procs = []
    try:
        for i, (svc, node) in enumerate(services.items()):
            host = spec.hosts[node]
            listen = [x for p in range(spec.planes)
                      for x in ("--listen", f"{host.interface(p, 0).ip}:{SERVICE_PORT + i}")]
            proc = live.fabric.spawn(host.name, f"t-{svc}",
                                     [sys.executable, "-m", "traffic", "agent-service",
                                      "--role", svc, *listen],
                                     pid_dir=live.pid_dir, stdout_pipe=True)
            procs.append(proc)
            assert proc.proc.stdout.readline().strip() == b"ready"
        plan = tmp_path / "plan.json"
        plan.write_text(json.dumps(agent_plan(spec, services)))
        done = live.fabric.run(spec.hosts[0].name, [
            sys.executable, "-m", "traffic", "agent-driver", "--plan", str(plan),
            "--hops-out", str(tmp_path / "hops.jsonl"),
            "--chains-out", str(tmp_path / "chains.jsonl"), "--chains", "12",
            "--concurrency", "4"], timeout=60)
        summary = json.loads(done.stdout.strip().splitlines()[-1])
    finally:
        for p in procs:
            p.stop()
    assert summary["chains_completed"] == 12 and summary["chains_failed"] == 0
    chains = [json.loads(x) for x in (tmp_path / "chains.jsonl").read_text().splitlines()]
    assert {c["plane"] for c in map(json.loads, (tmp_path / "hops.jsonl").read_text()
                                    .splitlines())} == {0, 1}  # chains use both planes
    assert all(c["latency_ms"] >= c["hop_sum_ms"] * 0.95 for c in chains)


def test_forwarding_survives_the_controller_dying(live):
    """Proactive paths and fail_mode=secure: killing the controller stops nothing."""
    spec = live.spec
    a, b = spec.hosts[0], spec.hosts[-1]
    os.killpg(live.controller.pid, signal.SIGKILL)
    assert wait_for(lambda: not live.controller.alive(), 5)
    for plane in range(spec.planes):
        assert live.fabric.ping(a.name, b.interface(plane, 0).ip, count=3, wait_s=2, interval_s=0.2)
    flows = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows",
                            spec.hosts[0].interfaces[0].switch], capture_output=True,
                           text=True).stdout
    assert "n_packets" in flows and "nw_dst=" in flows


@pytest.mark.userspace_datapath
def test_a_small_ovs_send_socket_is_enlarged_in_place(live):
    """ovs-vswitchd's one send socket bounds what all switch queues hold together; one
    created small before a run (208 KB) is raised to 8 MB in place. The kernel datapath
    forwards in the kernel and has no such socket."""
    from testbed.core.fidelity import ovs_pid
    from testbed.fabric import ovs_socket
    from testbed.fabric.net import OVS_SOCKET_BUFFER

    pid = ovs_pid()
    assert ovs_socket.send_buffer_bytes([pid]) >= OVS_SOCKET_BUFFER  # bring-up made sure
    fd, _ = ovs_socket.send_sockets()[pid]
    try:
        assert ovs_socket.set_size(pid, fd, 212992) is None
        assert ovs_socket.send_buffer_bytes([pid]) == 212992
        assert ovs_socket.enlarge(OVS_SOCKET_BUFFER, [pid]) is None
        assert ovs_socket.send_buffer_bytes([pid]) >= OVS_SOCKET_BUFFER
    finally:
        ovs_socket.set_size(pid, fd, OVS_SOCKET_BUFFER)


@contextmanager
def _host_address(prefix: str):
    """An IPv4 address of the host's own namespace, for the test's ARP question: on a
    veth of the run's own (named with its prefix, removed after), so the test does not
    depend on what the host has (the lab VM's namespace has no address)."""
    a, b, address = f"{prefix}z0", f"{prefix}z1", "192.0.2.77"
    subprocess.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b], check=True)
    try:
        subprocess.run(["ip", "addr", "add", f"{address}/32", "dev", a], check=True)
        subprocess.run(["ip", "link", "set", a, "up"], check=True)
        yield address
    finally:
        subprocess.run(["ip", "link", "del", a], capture_output=True)


def test_the_hosts_own_stack_takes_no_part_in_the_lab(live):
    """Every switch port in the host's namespace, on either datapath, has no IPv6 address
    and the sysctls that keep the host's stack out (on the kernel datapath, before they
    were sealed, the host's stack sent its IPv6 solicitations into the lab); a lab host
    asking by ARP for one of the host's own addresses (whose request every root-side
    port's kernel sees on the userspace datapath) gets no reply (before the ports were
    sealed, the host answered)."""
    from testbed.fabric.net import ROOT_PORT_SYSCTLS

    spec = live.spec
    ports = [p.ifname for p in spec.switch_ports()]
    for ifname in ports:
        for family, key, value in ROOT_PORT_SYSCTLS:
            path = Path(f"/proc/sys/net/{family}/conf/{ifname}/{key}")
            assert path.read_text().strip() == value, (ifname, key)
    inet6 = subprocess.run(["ip", "-6", "-o", "addr", "show"], capture_output=True,
                           text=True).stdout
    assert not [line for line in inet6.splitlines() if line.split()[1] in ports]
    a = spec.hosts[0]
    intf = a.interface(0, 0)
    with _host_address(spec.prefix) as target:
        asker = (
            "from scapy.all import ARP, Ether, srp\n"
            f"ans, _ = srp(Ether(dst='ff:ff:ff:ff:ff:ff') / ARP(pdst='{target}', "
            f"psrc='{intf.ip}'), iface='{intf.name}', timeout=2, retry=1, verbose=0)\n"
            "print(len(ans))\n")
        done = live.fabric.run(a.name, [sys.executable, "-c", asker], timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0", f"the host answered ARP for {target}"
