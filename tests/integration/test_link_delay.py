"""Propagation delay on fabric links: netem under each port's HTB class where the kernel
has it (the lab VM), so a ping across a spine takes the sum of its hops' delays."""

from __future__ import annotations

import re

import pytest

from .conftest import small_fabric

pytestmark = [pytest.mark.ovs, pytest.mark.vm]

DELAY_MS = 5


@pytest.fixture(scope="module")
def delayed(tmp_path_factory):
    """One plane, two leaves with one node each, one spine; every link 5 ms one way."""
    from testbed.host.capabilities import probe
    from testbed.host.naming import new_run_id

    if not probe(new_run_id()).netem:  # the bring-up's own probe would only record it
        pytest.skip("the kernel has no netem (sch_netem): link delay is only recorded")
    with small_fabric(tmp_path_factory, "delay", planes=1, nodes=2, leaves_per_plane=2,
                      spines_per_plane=1, delay_ms=DELAY_MS) as (live, _):
        yield live


def test_a_ping_across_the_spine_takes_the_delay_of_every_hop(delayed):
    live = delayed
    if not live.fabric.delay_applied:
        pytest.skip("the kernel has no netem (sch_netem): link delay is only recorded")
    a, b = live.spec.hosts
    port = a.interface(0, 0)
    assert "netem" in live.fabric.run(a.name, ["tc", "qdisc", "show", "dev", port.name]).stdout
    done = live.fabric.run(a.name, ["ping", "-c", "5", "-i", "0.2", "-q",
                                    b.interface(0, 0).ip], timeout=30)
    rtt_min = float(re.search(r"= ([\d.]+)/", done.stdout).group(1))
    # four egress queues each way (host, leaf uplink, spine, leaf downlink): 8 x 5 ms;
    # the upper bound leaves room for a slow (emulated) host, the lower one is the point
    assert 8 * DELAY_MS <= rtt_min < 8 * DELAY_MS + 40, done.stdout
