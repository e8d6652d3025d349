"""A paused host NIC holds back the RoCE sender, as a NIC holds back its queue pair.

A veth in a namespace of the test's own, its queue paused the way the PFC agent pauses
one (a token bucket at 1 kbit/s, a 320 KB queue: the lossless class of a host NIC). A
training rank's data socket keeps sending 4 KB frames into it: the send must block with
little of the step in the NIC queue, not fill the queue (the step then looks sent while
it waits behind the pause, and the receiver's step time-out calls late frames lost). An
ordinary socket (8 MB send buffer) beside it fills the queue: the comparison shows the
queue would take far more.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testbed.host.naming import new_run_id, register, run_dir, run_prefix
from traffic.training import NIC_TX_BYTES

pytestmark = pytest.mark.root

QUEUE = 320_000

SENDER = textwrap.dedent("""
    import json, sys, threading, time
    from traffic.rawsock import RawSender
    from traffic.training import data_sender
    iface, kind = sys.argv[1], sys.argv[2]
    sender = data_sender(iface) if kind == "data" else RawSender(iface)
    frame = bytes.fromhex("020000000002020000000001") + b"\\x88\\xb5" + bytes(4096)
    sent = [0]
    def send():
        while True:
            sender.send(frame)
            sent[0] += 1
    threading.Thread(target=send, daemon=True).start()
    time.sleep(1.5)
    print(json.dumps({"sent": sent[0]}), flush=True)
""")


def _backlog(ns: str, dev: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", ns, "tc", "-s", "-j", "qdisc", "show", "dev",
                          dev], capture_output=True, text=True, check=True).stdout
    return max(q.get("backlog", 0) for q in json.loads(out))


@pytest.fixture
def paused_nic():
    run_id = new_run_id()
    ns = f"{run_prefix(run_id)}nic"
    subprocess.run(["ip", "netns", "add", ns], check=True)
    register(run_id, "netns", ns)
    try:
        for argv in (["link", "add", "v0", "type", "veth", "peer", "name", "v1"],
                     ["link", "set", "v0", "mtu", "9000", "up"],
                     ["link", "set", "v1", "mtu", "9000", "up"]):
            subprocess.run(["ip", "-n", ns, *argv], check=True)
        subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "add", "dev", "v0", "root",
                        "tbf", "rate", "1kbit", "burst", "9018", "limit", str(QUEUE)],
                       check=True)
        yield ns
    finally:
        subprocess.run(["ip", "netns", "del", ns], check=False)
        shutil.rmtree(run_dir(run_id), ignore_errors=True)


def _fill(ns: str, kind: str) -> tuple[int, int]:
    repo = Path(__file__).resolve().parents[2]
    done = subprocess.run(["ip", "netns", "exec", ns, sys.executable, "-c", SENDER, "v0", kind],
                          capture_output=True, text=True, timeout=30, cwd=repo, check=True)
    return json.loads(done.stdout)["sent"], _backlog(ns, "v0")


def test_a_paused_nic_blocks_the_data_socket_with_little_queued(paused_nic):
    sent, backlog = _fill(paused_nic, "data")
    # what a NIC's transmit buffer holds (the kernel counts buffers at about twice the
    # frame), not the class's 320 KB
    assert 0 < backlog <= 2 * NIC_TX_BYTES, (sent, backlog)
    assert sent * 4110 <= 2 * NIC_TX_BYTES + 9018, (sent, backlog)


def test_an_ordinary_socket_fills_the_paused_queue(paused_nic):
    _, backlog = _fill(paused_nic, "ordinary")
    assert backlog > QUEUE - 9000, backlog
