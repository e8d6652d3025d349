"""The lab's own switch processes on real packets: forwarding through the veths' shaped
queues, the host's Open vSwitch untouched, nothing left after a stop, and after a
SIGKILL nothing that ``testbed clean`` cannot find."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.host.procs import wait_for

from .conftest import small_fabric

pytestmark = [pytest.mark.ovs, pytest.mark.userspace_datapath]
REPO = Path(__file__).resolve().parents[2]


def _host_ovs() -> tuple[str, str]:
    show = subprocess.run(["ovs-vsctl", "show"], capture_output=True, text=True).stdout
    other = subprocess.run(["ovs-vsctl", "get", "Open_vSwitch", ".", "other_config"],
                           capture_output=True, text=True).stdout
    return show, other


def _vswitchds(run_id: str) -> list[int]:
    """ovs-vswitchd processes whose command line names the run's folder."""
    pids = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            cmd = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if cmd and cmd[0].endswith(b"ovs-vswitchd") and any(
                f"/run/testbed/{run_id}/".encode() in c for c in cmd):
            pids.append(int(proc.name))
    return pids


def test_lab_processes_forward_through_the_shaped_veths(tmp_path_factory):
    before = _host_ovs()
    switches = {"daemon": "lab", "shards": "pod"}
    with small_fabric(tmp_path_factory, "lab-processes", switches=switches,
                      link_mbps=20) as (live, _):
        fabric, spec = live.fabric, live.spec
        run_id = spec.prefix[2:]
        assert fabric.daemons is not None
        pids = fabric.switch_pids()
        assert len(pids) == len(fabric.daemons.instances) >= 2
        assert sorted(_vswitchds(run_id)) == sorted(pids)
        # no bridge of the lab on the host's Open vSwitch
        assert spec.prefix not in subprocess.run(["ovs-vsctl", "list-br"],
                                                 capture_output=True, text=True).stdout
        # every process's send socket raised, also of those that had not sent during
        # bring-up (each was made to send one frame)
        from testbed.fabric import ovs_socket
        from testbed.fabric.net import OVS_SOCKET_BUFFER

        sockets = ovs_socket.send_sockets()
        assert all(sockets[pid][1] >= OVS_SOCKET_BUFFER for pid in pids), sockets
        for inst in fabric.daemons.instances:  # without --mlockall: no locked memory
            locked = [ln for ln in Path(f"/proc/{inst.vswitchd.pid}/status").read_text()
                      .splitlines() if ln.startswith("VmLck:")]
            assert locked == ["VmLck:\t       0 kB"], locked
        a, b = spec.hosts[0], spec.hosts[-1]
        queues0 = fabric.queue_stats()
        for plane in range(spec.planes):
            assert fabric.ping(a.name, b.interface(plane, 0).ip, count=20, wait_s=2, interval_s=0.1)
        queues1 = fabric.queue_stats()
        # the frames left through the veths' egress queues (the emulated ports): 20
        # requests and 20 replies a plane, over at least 3 switches each way
        sent = {k: queues1[k]["packets"] - queues0[k]["packets"] for k in queues1}
        assert sum(sent.values()) >= 2 * 20 * spec.planes * 3, sent
        # ovs-ofctl reaches a lab bridge through its management socket
        flows = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-flows",
                                fabric.daemons.mgmt(a.interfaces[0].switch)],
                               capture_output=True, text=True)
        assert flows.returncode == 0 and "n_packets" in flows.stdout, flows.stderr
        # TCP through the lab processes (offloads off on the veths)
        server = fabric.spawn(b.name, "iperf3s", ["iperf3", "-s", "-1", "-p", "5301"],
                              pid_dir=live.pid_dir)
        try:
            wait_for(lambda: fabric.run(b.name, ["ss", "-ltn"]).stdout.count(":5301") > 0, 5)
            done = fabric.run(a.name, ["iperf3", "-c", b.interface(0, 0).ip, "-p", "5301",
                                       "-t", "3", "-J"], timeout=30)
            assert done.returncode == 0, done.stdout[-300:]
            mbps = json.loads(done.stdout)["end"]["sum_received"]["bits_per_second"] / 1e6
            assert 14 <= mbps <= 21, mbps  # the 20 Mb/s link's rate, shaped on the veths
        finally:
            server.stop()
    assert _vswitchds(run_id) == []
    assert _host_ovs() == before


SCENARIO = textwrap.dedent("""\
    name: killed-lab
    duration_s: 5
    topology: {planes: 1, nodes: 2, leaves_per_plane: 1, spines_per_plane: 1, link_mbps: 20}
    switches: {daemon: lab, shards: switch}
    agents: {enabled: false}
    """)


def test_a_killed_labs_switch_processes_are_found_by_clean(tmp_path):
    scenario = tmp_path / "killed.yaml"
    scenario.write_text(SCENARIO)
    up = subprocess.run([sys.executable, "-m", "testbed.core.cli", "up", str(scenario), "--name",
                         "killed-lab", "--results", str(tmp_path / "results")], cwd=REPO,
                        capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr[-500:]
    folders = [f for f in Path("/run/testbed").iterdir()
               if (f / "lab.json").exists() and "killed-lab" in (f / "lab.json").read_text()]
    assert len(folders) == 1
    run_id = folders[0].name
    switches = _vswitchds(run_id)
    assert len(switches) == 2
    supervisor = int((folders[0] / "supervisor.pid").read_text().split()[0])
    os.kill(supervisor, signal.SIGKILL)
    assert wait_for(lambda: not Path(f"/proc/{supervisor}").exists()
                    or "Z" in Path(f"/proc/{supervisor}/stat").read_text().split()[2], 5)
    assert sorted(_vswitchds(run_id)) == sorted(switches)  # a SIGKILL runs no finally
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "clean"], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert _vswitchds(run_id) == []
    left = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert f"tb{run_id}" not in left


def test_other_config_reaches_the_database_before_the_process_starts(tmp_path):
    """A probe's settings (``other_config``) are in a lab process's database when its
    ovs-vswitchd starts, and it runs the binary it was given."""
    from testbed.fabric.switchd import SwitchDaemons

    daemons = SwitchDaemons([["tbprobe0"]], folder=tmp_path / "switch",
                            binary="/usr/sbin/ovs-vswitchd",
                            other_config=["stats-update-interval=12345"])
    try:
        daemons.start()
        inst = daemons.instances[0]
        got = daemons.vsctl(inst, ["get", "Open_vSwitch", ".",
                                   "other_config:stats-update-interval"]).strip()
        assert got.strip('"') == "12345"
        pid = daemons.pids()[0]
        assert Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == \
            b"/usr/sbin/ovs-vswitchd"
    finally:
        daemons.stop()
    assert not daemons.pids()
