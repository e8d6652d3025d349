"""Labs that stay up (``testbed up`` ... ``testbed down``), end to end on a small fabric:
the lab outlives the command that made it, ``ls`` shows it, commands run in its hosts,
a fault by hand breaks a ping and its restore mends it, a capture during a short
training run decodes as RoCEv2, ``down`` leaves nothing; ``clean`` removes a lab whose
supervisor died and leaves a live one alone.

The clean of one named dead lab (``--run``) asserts what it stops and leaves, not how
fast: it shares the host (``shares_host``). The others run alone: the capture must hold
CE marks or CNPs, which need the training's senders to fill the uplinks, and the clean
of every dead run would clean a test's runs beside it too."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from testbed.host.procs import wait_for

from .conftest import leftovers

pytestmark = pytest.mark.ovs

REPO = Path(__file__).resolve().parents[2]
SCENARIO = REPO / "tests" / "scenarios" / "lab-small.yaml"


def run_testbed(*args: str, timeout: float = 180, stdin: str | None = None
            ) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "testbed.core.cli", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout, input=stdin)


def on_terminal(args: list[str], steps: list[tuple[bytes, str | None]],
                timeout: float = 60) -> str:
    """Run ``testbed ARGS`` on a pseudo-terminal, type each step's keys once the prompt is
    up and wait for its text on the screen (None: for the program to end); the screen."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: testbed on the terminal
        os.chdir(REPO)
        os.execv(sys.executable, [sys.executable, "-m", "testbed.core.cli", *args])
    screen, deadline = "", time.monotonic() + timeout

    def until(text: str | None) -> bool:
        nonlocal screen
        while time.monotonic() < deadline:
            if text is not None and text in screen:
                return True
            ready, _, _ = select.select([fd], [], [], 0.5)
            if ready:
                try:
                    data = os.read(fd, 4096)
                except OSError:  # the program ended
                    data = b""
                if not data:
                    return text is None
                screen += data.decode(errors="replace")
        return False

    try:
        assert until("> "), screen
        for keys, text in steps:
            mark = len(screen)
            os.write(fd, keys)
            assert until(text), (keys, screen[mark:])
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, screen
        pid = 0
    finally:
        if pid:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        os.close(fd)
    return screen


def record_of(name: str) -> dict:
    done = run_testbed("ls", "--json")
    assert done.returncode == 0, done.stderr
    return next(r for r in json.loads(done.stdout) if r["name"] == name)


def ping(lab: str, src: str, ip: str) -> bool:
    return run_testbed("exec", lab, src, "--", "ping", "-n", "-c1", "-W1", ip).returncode == 0


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """A lab brought up with training and a capture of n0's NIC, shared by the module's
    tests (test_lab_up_ls_exec_fault_capture_down, the last to use it, takes it down and
    checks that); removed at the end in any case."""
    name = f"t{os.getpid() % 100000}"
    up = run_testbed("up", str(SCENARIO), "--name", name, "--traffic", "--duration", "4",
                 "--results", str(tmp_path_factory.mktemp("lab")))
    assert up.returncode == 0, up.stderr + up.stdout
    record = record_of(name)
    yield name, record, up.stdout
    run_testbed("down", name)
    assert leftovers(f"tb{record['run_id']}") == []


def test_clean_removes_a_dead_lab_and_leaves_a_live_one(lab, tmp_path):
    name, record, _ = lab
    dead = f"d{os.getpid() % 100000}"
    up = run_testbed("up", str(SCENARIO), "--name", dead, "--results", str(tmp_path))
    assert up.returncode == 0, up.stderr
    dead_record = record_of(dead)
    os.kill(dead_record["owner"]["pid"], signal.SIGKILL)  # the supervisor dies
    assert wait_for(lambda: not Path(f"/proc/{dead_record['owner']['pid']}").exists(), 10)
    assert "dead" in run_testbed("ls").stdout
    dry = run_testbed("clean", "--dry-run")
    assert f"/run/testbed/{dead_record['run_id']}" in dry.stdout
    assert f"/run/testbed/{record['run_id']}" not in dry.stdout
    assert f"left alone: lab {name}" in dry.stdout or record["run_id"] in dry.stdout
    done = run_testbed("clean")
    assert done.returncode == 0, done.stderr
    assert leftovers(f"tb{dead_record['run_id']}") == []
    assert record_of(name)["alive"]  # the live lab is untouched
    assert ping(name, "n0", "10.0.0.4")


def test_lab_up_ls_exec_fault_capture_down(lab):
    name, record, printed = lab
    assert f"lab {name} is up" in printed and "n0p0r0 10.0.0.1/24" in printed
    assert record["alive"] and record["kind"] == "fabric" and record["variant"] == "lab-small"
    assert Path(f"/proc/{record['owner']['pid']}").exists()  # outlived `testbed up`
    listed = run_testbed("ls")
    assert name in listed.stdout and "4 sw / 4 hosts / 8 links" in listed.stdout
    # the lab shown again: controller, hosts, switches with datapath ids and ports
    shown = run_testbed("inspect", name)
    assert shown.returncode == 0, shown.stderr
    assert "OpenFlow tcp:127.0.0.1:" in shown.stdout and "n0p0r0 10.0.0.1/24" in shown.stdout
    spec = json.loads(Path(record["spec"]).read_text())
    leaf = next(s for s in spec["switches"] if s["name"].endswith("p0l0"))
    assert re.search(rf"p0l0 +{leaf['dpid']:#018x} +leaf", shown.stdout), shown.stdout
    assert "1:p0l0e1>n0" in shown.stdout, shown.stdout  # port 1 of p0l0 faces n0
    as_json = json.loads(run_testbed("inspect", name, "--json").stdout)
    assert as_json["spec"]["switches"] == spec["switches"]

    done = run_testbed("exec", name, "n0", "--", "ip", "-o", "addr")
    assert done.returncode == 0 and "10.0.0.1/24" in done.stdout
    assert run_testbed("exec", name, "n0", "--", "false").returncode == 1
    n3 = "10.0.0.4"
    assert ping(name, "n0", n3)

    # training ran for 4 s from `up`: the scenario capture of n0's NIC holds RoCEv2
    out = Path(record["out"])
    assert wait_for(lambda: (out / "training-rank0.jsonl").exists()
                    and (out / "training-rank0.jsonl").stat().st_size > 0, 30)
    extra = out / "extra.pcap"
    cap = run_testbed("capture", name, "p0l0e1", "-o", str(extra), "--seconds", "2")
    assert cap.returncode == 0, cap.stderr
    if shutil.which("tshark"):
        # the whole 4 s of training first: how soon the uplinks queue enough to mark CE
        # varies (once, the first 2.5 s held no CE and no CNP)
        time.sleep(max(0.0, record["created"] + record["up_s"] + 5 - time.time()))
        pcap = out / "capture-n0p0r0.pcap"
        decoded = subprocess.run(
            ["tshark", "-r", str(pcap), "-d", "udp.port==4791,infiniband", "-T", "fields",
             "-e", "infiniband.bth.opcode", "-e", "ip.dsfield.ecn", "-Y", "infiniband"],
            capture_output=True, text=True, timeout=60)
        rows = [ln.split("\t") for ln in decoded.stdout.splitlines() if ln.strip()]
        assert rows, decoded.stderr
        opcodes = {r[0] for r in rows}
        ecn = {r[1] for r in rows}
        assert opcodes & {"0", "1", "2", "4"}  # SEND first/middle/last/only
        assert "2" in ecn  # ECT(0): the senders are ECN-capable (training.ecn)
        # the 2:1 uplinks queue and the phantom queues mark CE; receivers answer with CNPs
        assert "3" in ecn or "129" in opcodes, sorted(set(map(tuple, rows)))

    # a fault by hand on the pinged path, seen in a ping, then restored
    done = run_testbed("fault", name, "link_down", "n0-p0l0")
    assert done.returncode == 0, done.stderr
    assert not ping(name, "n0", n3)
    assert run_testbed("fault", name, "link_up", "n0-p0l0").returncode == 0
    assert wait_for(lambda: ping(name, "n0", n3), 10, 0.2)
    assert run_testbed("fault", name, "rail_fail", "n3p0r0").returncode == 0
    assert not ping(name, "n0", n3)
    assert run_testbed("fault", name, "rail_restore", "n3p0r0").returncode == 0
    assert wait_for(lambda: ping(name, "n0", n3), 10, 0.2)

    # Mininet's CLI, served by the supervisor
    cli = run_testbed("cli", name, stdin="n0 ping -c1 n3\nlink p0l0 p0s0 down\n"
                                     "link p0l0 p0s0 up\niperf n0 n3\n", timeout=60)
    assert cli.returncode == 0 and "1 received" in cli.stdout, cli.stdout + cli.stderr
    # Mininet's own iperf (iperf 2.1 made it wait for ever: mininet/mininet#1060)
    rates = re.search(r"Results: \['([\d.]+) Mbits/sec', '([\d.]+) Mbits/sec'\]", cli.stdout)
    assert rates and 0 < float(rates[1]) < 25, cli.stdout  # 20 Mb/s links
    # on a terminal: Tab completes commands (and node names), Ctrl-D leaves
    screen = on_terminal(["cli", name], [(b"pinga\t\n", "Results: 0% dropped"),
                                         (b"n0 ping -c1 -W1 p0\t\t", "p0l0"),
                                         (b"\x15\x04", None)])
    assert "*** Ping: testing ping reachability" in screen, screen  # "pinga" + Tab ran pingall
    assert "n0 -> " in screen and f"tb{record['run_id']}n" not in screen, screen  # short names

    # bad input: one line, exit 2, nothing created. Each is refused before it changes
    # anything, so they run at once (each its own process, most of whose time is Python
    # starting up)
    bad = [("exec", "nolab", "n0", "--", "true"), ("exec", name, "n9", "--", "true"),
           ("inspect", "nolab"), ("fault", name),
           ("fault", name, "melt", "p0s0"), ("fault", name, "link_down", "n9-p0l0"),
           ("capture", name, "p9l9e9", "--seconds", "1"), ("down", "nolab"),
           ("up", str(SCENARIO), "--name", name), ("up", str(SCENARIO), "--variant", "x")]
    with ThreadPoolExecutor(max_workers=len(bad)) as pool:
        refused = list(pool.map(lambda args: run_testbed(*args), bad))
    for args, done in zip(bad, refused, strict=True):
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, (args, done.stderr)

    run_id = record["run_id"]
    done = run_testbed("down", name)
    assert done.returncode == 0 and f"lab {name} is down" in done.stdout, done.stderr
    assert leftovers(f"tb{run_id}") == []
    assert name not in run_testbed("ls").stdout


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] not in "ZX"
    except OSError:
        return False


@pytest.mark.shares_host
def test_clean_stops_a_daemon_left_in_a_dead_labs_host(tmp_path):
    """As lab 1's guide does, a daemon started in a host (``iperf3 -s -D``); the lab's
    supervisor dies (SIGKILL) and the host shells with it, so no live shell names the
    daemon's namespace any more: clean finds it by the namespace the lab recorded when it
    made the host, stops it, and leaves nothing (a second dry run has nothing to clean)."""
    name = f"k{os.getpid() % 100000}"
    up = run_testbed("up", str(SCENARIO), "--name", name, "--results", str(tmp_path))
    assert up.returncode == 0, up.stderr + up.stdout
    record = record_of(name)
    run_id, supervisor = record["run_id"], record["owner"]["pid"]
    pid_file = tmp_path / "iperf3.pid"
    daemon = None
    try:
        done = run_testbed("exec", name, "n3", "--", "iperf3", "-s", "-D", "-p",
                           str(20000 + os.getpid() % 20000), "-I", str(pid_file))
        assert done.returncode == 0, done.stderr
        assert wait_for(lambda: pid_file.exists() and pid_file.read_text().strip(), 10)
        daemon = int(pid_file.read_text().split()[0])
        assert os.stat(f"/proc/{daemon}/ns/net").st_ino != os.stat("/proc/self/ns/net").st_ino
        os.kill(supervisor, signal.SIGKILL)
        assert wait_for(lambda: not _running(supervisor), 10)
        shells = f"mininet:tb{run_id}"
        assert wait_for(lambda: shells not in subprocess.run(
            ["ps", "-eo", "args"], capture_output=True, text=True).stdout, 10)
        assert _running(daemon)  # the shells are gone; the daemon is not
        dry = run_testbed("clean", "--dry-run", "--run", run_id)
        assert f"process {daemon} (iperf3) in a namespace of the run" in dry.stdout, dry.stdout
        done = run_testbed("clean", "--run", run_id)
        assert done.returncode == 0, done.stderr
        assert f"removed process {daemon} (iperf3)" in done.stdout, done.stdout
        assert not _running(daemon)
        assert leftovers(f"tb{run_id}") == []
        again = run_testbed("clean", "--dry-run", "--run", run_id)
        assert "nothing to clean" in again.stdout, again.stdout
    finally:
        if daemon is not None and _running(daemon):
            os.kill(daemon, signal.SIGKILL)
        if _running(supervisor):
            os.kill(supervisor, signal.SIGKILL)
        run_testbed("clean", "--run", run_id)
