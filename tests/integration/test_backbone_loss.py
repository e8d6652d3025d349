"""Loss on a real veth link: degrade_link drops about the set fraction (nftables where
netem is missing), restore_degraded_link and teardown leave no table behind.

With MACsec the loss acts on the wire under the protected interfaces (a netdev
egress hook, which also sees the userspace forwarder's packet socket)."""

from __future__ import annotations

import json
import shutil
import subprocess
from contextlib import ExitStack

import pytest

from testbed.backbone import secure
from testbed.backbone.net import BackboneNet
from testbed.host.naming import new_run_id, run_dir, run_prefix
from topologies.backbone import small_backbone

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(shutil.which("nft") is None, reason="needs nftables"),
              pytest.mark.shares_host]

#: at the 10 % set, the lost share of 1,000 has a standard deviation of 0.0095: the
#: assertion's band of 0.05 is 5.3 of them
SENT = 1000


def _tables(netns: str) -> list[str]:
    done = subprocess.run(["ip", "netns", "exec", netns, "nft", "-j", "list", "tables"],
                          capture_output=True, text=True)
    if done.returncode:
        return []
    return [x["table"]["name"] for x in json.loads(done.stdout)["nftables"] if "table" in x]


def _rx_packets(netns: str, ifname: str) -> int:
    out = subprocess.run(["ip", "-n", netns, "-j", "-s", "link", "show", ifname],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out)[0]["stats64"]["rx"]["packets"]


@pytest.mark.parametrize("encrypted", [False, True], ids=["plain", "macsec"])
def test_degrade_link_drops_about_the_set_fraction(tmp_path, encrypted):
    run_id = new_run_id()
    prefix = run_prefix(run_id)
    link = "p1-p2-1"
    macsec = {**secure.DEFAULTS, "enabled": True} if encrypted else None
    with ExitStack() as stack:
        # the run folder the net registers its names in goes last, as a run's does
        stack.callback(shutil.rmtree, run_dir(run_id), True)
        net = BackboneNet(small_backbone(), prefix, tmp_path, stack, macsec=macsec,
                          macsec_backend="userspace")
        net.build(shape=False, delay=False)  # no netem qdisc: the nftables path
        a_ns, b_ns = net.ns("p1"), net.ns("p2")
        net.degrade_link(link, 0.10)
        table = net.loss_table(link)
        assert table.startswith(prefix)
        assert table in _tables(a_ns) and table in _tables(b_ns)
        before = _rx_packets(b_ns, net.ifname(link, "b"))
        subprocess.run(["ip", "netns", "exec", a_ns, "ping", "-q", "-n", "-c", str(SENT),
                        "-i", "0.002", "-W", "1", net.link_addr(link, "b")],
                       capture_output=True, text=True, timeout=60)
        arrived = _rx_packets(b_ns, net.ifname(link, "b")) - before
        lost = 1 - arrived / SENT  # one way: the echo requests that reached p2
        print(f"degrade_link 10 %: {SENT - arrived} of {SENT} lost ({lost:.3f})")
        assert 0.05 <= lost <= 0.15, f"lost {lost:.3f} of {SENT} at 10 %"
        net.restore_degraded_link(link)
        assert table not in _tables(a_ns) and table not in _tables(b_ns)
        net.degrade_link(link, 0.5)  # left in place: teardown must remove it
        if encrypted:  # the drops happened on the wire: the receiver saw no gap it rejected
            counters = net.secure.counters()[link]
            assert counters["b"]["InPktsOK"] >= arrived
            assert counters["b"]["InPktsNotValid"] == 0
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert prefix not in names  # namespaces (and their tables) are gone
    procs = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert str(tmp_path) not in procs  # no forwarder left
    assert not run_dir(run_id).exists()  # nothing for `testbed clean` to find
