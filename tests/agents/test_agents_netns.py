"""Root: service and driver in two network namespaces joined by a veth pair.

Namespaces are ``tba<hex>``, veths ``tb<hex>a/b`` and addresses 10.x only
inside the namespaces, so nothing touches the host's own network. ECN is
enabled in the driver's namespace to check the summary reports it.
"""

import re
import secrets
import subprocess

import pytest

from traffic.agent_plan import default_plan

pytestmark = pytest.mark.root
CREATED: list[str] = []
OUR_NAME = re.compile(r"^tba[0-9a-f]{6}[sd]$")


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=10)


def _namespaces() -> list[str]:
    out = subprocess.run(["ip", "netns", "list"], check=True, capture_output=True, text=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


@pytest.fixture
def netns_pair():
    tag = secrets.token_hex(3)
    srv, drv = f"tba{tag}s", f"tba{tag}d"
    veth_s, veth_d = f"tb{tag}a", f"tb{tag}b"
    octet = int(tag[:2], 16)
    addr_s, addr_d = f"10.{octet}.77.1", f"10.{octet}.77.2"
    CREATED.extend((srv, drv))
    try:
        _ip("netns", "add", srv)
        _ip("netns", "add", drv)
        _ip("link", "add", veth_s, "netns", srv, "type", "veth", "peer", "name", veth_d,
            "netns", drv)
        for ns, dev, addr in ((srv, veth_s, addr_s), (drv, veth_d, addr_d)):
            _ip("-n", ns, "addr", "add", f"{addr}/30", "dev", dev)
            _ip("-n", ns, "link", "set", dev, "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        subprocess.run(["ip", "netns", "exec", drv, "sysctl", "-qw", "net.ipv4.tcp_ecn=1"],
                       check=True, timeout=10)
        yield srv, drv, addr_s
    finally:
        for ns in (srv, drv):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=10)
        assert srv not in _namespaces() and drv not in _namespaces()


def test_chains_across_namespaces(procs, netns_pair, tmp_path):
    srv, drv, addr = netns_pair
    services = {}
    for i, role in enumerate(["agent", "retriever", "tool", "model"]):
        services[role] = [(addr, 7001 + i)]
        procs.service(role, [f"{addr}:{7001 + i}"], prefix=["ip", "netns", "exec", srv])
    try:
        summary, hops, chains = procs.driver(default_plan(services), tmp_path, "--chains", "40",
                                             "--concurrency", "8", "--ecn",
                                             prefix=["ip", "netns", "exec", drv])
    finally:
        procs.close()
    assert summary["chains_completed"] == 40 and summary["chains_failed"] == 0
    assert all(c["ok"] for c in chains) and len(hops) == summary["hops_ok"]
    assert summary["ecn"] == {"requested": True, "tcp_ecn": 1, "effective": True}


def test_no_namespace_left():
    """Runs after the test above: no namespace of ours (tba<hex>s/d) may remain.

    Other tba* namespaces can belong to concurrent sessions on a shared host,
    so only names this module's pattern produces are checked.
    """
    if not CREATED:
        pytest.skip("the namespace test did not run")
    left = _namespaces()
    assert not [ns for ns in left if ns in CREATED or OUR_NAME.match(ns)]
