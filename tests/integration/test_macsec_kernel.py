"""Kernel backend: the probe, backend choice, counter parsing, and a link where available."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from testbed.host.hosts import NetnsHost
from testbed.macsec.attacker import tampered_frame, untagged_frame
from testbed.macsec.config import LinkConfig, SideConfig
from testbed.macsec.kernel import (
    KernelMacsecLink,
    MixedLink,
    create_link,
    kernel_macsec_available,
    parse_ip_macsec_stats,
)
from testbed.macsec.link import UserspaceLink
from testbed.macsec.netns import leftovers, run, spawn, stop_group
from testbed.macsec.secy import RX_DISPOSITIONS, SecYCounters

pytestmark = pytest.mark.vm

#: ``ip -j -s macsec show tbm0`` as iproute2 prints it (ip/ipmacsec.c: the SecY's and the
#: transmit SC's counters in the device's object, each receive SC's in ``rx_sc``, each
#: SA's in its ``sa_list``)
IP_S_MACSEC = json.dumps([{
    "ifindex": 11, "ifname": "tbm0", "protect": True, "validate": "strict",
    "sc": False, "sa": False, "encrypt": True, "send_sci": True, "end_station": False,
    "scb": False, "replay": False, "cipher_suite": "GCM-AES-128", "icv_length": 16,
    "sci": "0x0274620000010001", "encoding_sa": 0,
    "OutPktsUntagged": 0, "InPktsUntagged": 0, "OutPktsTooLong": 0, "InPktsNoTag": 7,
    "InPktsBadTag": 2, "InPktsUnknownSCI": 0, "InPktsNoSCI": 1, "InPktsOverrun": 0,
    "OutPktsProtected": 0, "OutPktsEncrypted": 12, "OutOctetsProtected": 0,
    "OutOctetsEncrypted": 1200,
    "sa_list": [{"an": 0, "pn": 13, "active": True, "key": "00" * 16,
                 "OutPktsProtected": 0, "OutPktsEncrypted": 12}],
    "rx_sc": [{"sci": "0x0274620000020001", "active": True, "InOctetsValidated": 0,
               "InOctetsDecrypted": 1100, "InPktsUnchecked": 0, "InPktsDelayed": 0,
               "InPktsOK": 11, "InPktsInvalid": 0, "InPktsLate": 3, "InPktsNotValid": 4,
               "InPktsNotUsingSA": 0, "InPktsUnusedSA": 0,
               "sa_list": [{"an": 0, "pn": 12, "active": True, "key": "01" + "00" * 15,
                            "InPktsOK": 11, "InPktsInvalid": 0, "InPktsNotValid": 4,
                            "InPktsNotUsingSA": 0, "InPktsUnusedSA": 0}]}],
}])


def test_parse_ip_macsec_stats_uses_same_names() -> None:
    c = parse_ip_macsec_stats(IP_S_MACSEC)
    assert set(c) == set(SecYCounters().as_dict())
    assert (c["InPktsNoTag"], c["InPktsBadTag"], c["InPktsNoSCI"]) == (7, 2, 1)
    assert (c["OutPktsEncrypted"], c["OutOctetsEncrypted"]) == (12, 1200)
    assert (c["InPktsOK"], c["InPktsLate"], c["InPktsNotValid"]) == (11, 3, 4)


@pytest.mark.root
def test_probe_and_auto_backend(tmp_path: Path) -> None:
    available = kernel_macsec_available()
    assert leftovers("tbkp") == []
    link = create_link(LinkConfig.generate("mk" + secrets.token_hex(3)), tmp_path)
    assert isinstance(link, KernelMacsecLink if available else UserspaceLink)


@pytest.mark.root
def test_kernel_link_counters_match_userspace_names(tmp_path: Path) -> None:
    if not kernel_macsec_available():
        pytest.skip("this kernel has no MACsec support (ip link add type macsec fails)")
    cfg = LinkConfig.generate("mk" + secrets.token_hex(3))
    with KernelMacsecLink(cfg, tmp_path) as link:
        out = run(["ping", "-c", "3", "-i", "0.2", cfg.b.address], netns=cfg.a.netns)
        assert " 0% packet loss" in out.stdout
        link.rotate()
        time.sleep(0.2)
        assert " 0% packet loss" in run(["ping", "-c", "3", "-i", "0.2", cfg.b.address],
                                        netns=cfg.a.netns).stdout
        ca, cb = link.counters("a"), link.counters("b")
        assert set(ca) == set(SecYCounters().as_dict())
        assert ca["OutPktsEncrypted"] == cb["InPktsOK"] >= 6
    assert leftovers("tbmk") == []


# --- kernel SecY against ours: the same attacks, frame for frame; one link of both ------

SUITES = ["gcm-aes-128", "gcm-aes-256", "gcm-aes-xpn-128", "gcm-aes-xpn-256"]
NO_KERNEL_MACSEC = "this kernel has no MACsec support (ip link add type macsec fails)"
#: frames the interoperation test's receivers accept out of order (IEEE 802.1AE's
#: replayWindow): the kernel's asynchronous GCM may complete frames out of order
INTEROP_WINDOW = 64
DROPS = ("InPktsNoTag", "InPktsBadTag", "InPktsNoSCI", "InPktsUnknownSCI", "InPktsLate",
         "InPktsNotValid", "InPktsInvalid", "InPktsNotUsingSA", "InPktsUnusedSA")

#: A tap on one veth: ``capture`` prints (hex) the next MACsec frame sent out of it,
#: ``send HEX`` puts a frame on it; the attacker of test_macsec_link.py, one frame a line.
WIRE_TAP = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.bind((sys.argv[1], 3))
    s.settimeout(30)
    print("ready", flush=True)
    for line in sys.stdin:
        cmd = line.split()
        if cmd[0] == "capture":
            while True:
                frame, addr = s.recvfrom(65536)
                if addr[2] == 4 and frame[12:14] == b"\\x88\\xe5":  # outgoing MACsec
                    break
            print(frame.hex(), flush=True)
        elif cmd[0] == "send":
            s.send(bytes.fromhex(cmd[1]))
            print("sent", flush=True)
""")


class WireTap:
    """The attacker's process on a veth, driven one frame at a time."""

    def __init__(self, netns: str, veth: str, workdir: Path) -> None:
        script = workdir / "wire_tap.py"
        script.write_text(WIRE_TAP)
        self.proc = subprocess.Popen(NetnsHost(netns).argv([sys.executable, str(script), veth]),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                                     start_new_session=True)
        assert self._reply() == "ready"

    def _reply(self) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        assert line, f"wire tap exited ({self.proc.poll()})"
        return line

    def _ask(self, line: str) -> str:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        return self._reply()

    def capture(self) -> bytes:
        return bytes.fromhex(self._ask("capture"))

    def send(self, frame: bytes) -> None:
        assert self._ask(f"send {frame.hex()}") == "sent"

    def stop(self) -> None:
        stop_group(self.proc)  # type: ignore[arg-type]


def rx_total(counters: dict[str, int]) -> int:
    return sum(counters[k] for k in RX_DISPOSITIONS)


def settled(read: Callable[[], dict[str, int]], before: dict[str, int],
            timeout: float = 20) -> dict[str, int]:
    """Counters once the receive path has counted a frame more and nothing moves for 0.5 s."""
    deadline = time.monotonic() + timeout
    last = read()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = read()
        if now == last and rx_total(now) > rx_total(before):
            return now
        last = now
    return last


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after[k] - before[k] for k in after if after[k] != before[k]}


def static_neighbours(cfg: LinkConfig) -> None:
    """No ARP on the link: each frame a step sends is the only frame of that step."""
    for s in "ab":
        me, peer = cfg.side(s), cfg.peer(s)
        run(["ip", "neigh", "replace", peer.address, "lladdr", peer.mac, "dev", me.tap,
             "nud", "permanent"], netns=me.netns)


def ping_once(cfg: LinkConfig) -> None:
    out = run(["ping", "-c", "1", "-W", "10", cfg.b.address], netns=cfg.a.netns, check=False,
              timeout=30).stdout
    assert " 0% packet loss" in out, out


def attack_deltas(link: KernelMacsecLink | UserspaceLink, workdir: Path) -> list[dict]:
    """Side a's counter deltas per step: a genuine echo reply, then b's frame replayed, a
    tampered copy (PN ahead of the window, one secure octet flipped), an untagged frame,
    and a genuine reply again. The attacker sends on b's veth, one frame a step."""
    cfg = link.config
    static_neighbours(cfg)
    tap = WireTap(cfg.b.netns, cfg.b.veth, workdir)
    try:
        ping_once(cfg)
        captured = tap.capture()  # b's echo reply, which a has accepted
        victim, peer = (bytes.fromhex(s.mac.replace(":", "")) for s in (cfg.a, cfg.b))
        steps: list[tuple[str, Callable[[], None]]] = [
            ("genuine", lambda: ping_once(cfg)),
            ("replayed", lambda: tap.send(captured)),
            ("tampered", lambda: tap.send(tampered_frame(captured, 0)[0])),
            ("untagged", lambda: tap.send(
                untagged_frame(victim, peer, cfg.b.address, cfg.a.address, 0))),
            ("genuine after", lambda: ping_once(cfg)),
        ]
        rows = []
        for name, step in steps:
            before, tap_before = link.counters("a"), link.tap_stats("a")["rx_packets"]
            step()
            after = settled(lambda: link.counters("a"), before)
            delivered = link.tap_stats("a")["rx_packets"] - tap_before  # to a's IP stack
            rows.append({"frame": name, "delta": delta(after, before), "delivered": delivered})
        return rows
    finally:
        tap.stop()


@pytest.fixture(scope="module")
def comparison_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the kernel-vs-userspace table goes: $VM_OUT (brought back from the lab VM)
    when set, else the session's tmp folder."""
    out = os.environ.get("VM_OUT")
    folder = Path(out) if out else tmp_path_factory.mktemp("macsec-compare")
    return folder / "macsec-kernel-vs-userspace.json"


def record(path: Path, key: str, value: object) -> None:
    table = json.loads(path.read_text()) if path.exists() else {}
    table[key] = value
    path.write_text(json.dumps(table, indent=1))


@pytest.mark.root
@pytest.mark.parametrize("suite", SUITES)
def test_kernel_and_userspace_secys_count_the_same_attacks(
        suite: str, tmp_path: Path, comparison_file: Path) -> None:
    if not kernel_macsec_available():
        pytest.skip(NO_KERNEL_MACSEC)
    rid = "mc" + secrets.token_hex(3)
    cfg = LinkConfig.generate(rid, suite=suite)  # validate strict, replay on, window 0
    rows = {}
    for backend in (KernelMacsecLink, UserspaceLink):  # one config: same keys, SCIs, PNs
        with backend(cfg, tmp_path / backend.backend) as link:
            rows[backend.backend] = attack_deltas(link, tmp_path)
    table = [{"frame": k["frame"], "kernel": k["delta"], "userspace": u["delta"],
              "delivered": {"kernel": k["delivered"], "userspace": u["delivered"]}}
             for k, u in zip(rows["kernel"], rows["userspace"], strict=True)]
    record(comparison_file, suite, table)
    for row in table:
        print(f"\n{suite} {row['frame']}: kernel {row['kernel']} userspace {row['userspace']}")
    assert leftovers(f"tb{rid}") == []
    for row in table:
        assert row["kernel"] == row["userspace"], row
        assert row["delivered"]["kernel"] == row["delivered"]["userspace"], row
    expected = {"genuine": "InPktsOK", "replayed": "InPktsLate", "tampered": "InPktsNotValid",
                "untagged": "InPktsNoTag", "genuine after": "InPktsOK"}
    for row in table:
        counted = {k: v for k, v in row["kernel"].items() if k in RX_DISPOSITIONS}
        assert counted == {expected[row["frame"]]: 1}, row
        genuine = row["frame"].startswith("genuine")
        assert row["delivered"]["kernel"] == (1 if genuine else 0), row
        # nothing answers an attack: no frame reaches a's stack by the uncontrolled port
        assert genuine or not any(k.startswith("Out") for k in row["kernel"]), row


#: ``sink HOST PORT``: take one TCP connection, print the octets and sha256 received;
#: ``send HOST PORT N``: send N random octets, wait for the sink to close, print the same.
TCP_TRANSFER = textwrap.dedent("""
    import hashlib, os, socket, sys
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "sink":
        with socket.create_server((host, port)) as srv:
            srv.settimeout(120)
            conn, _ = srv.accept()
            conn.settimeout(120)
            digest, n = hashlib.sha256(), 0
            while data := conn.recv(65536):
                digest.update(data)
                n += len(data)
            conn.close()
    else:
        data = os.urandom(int(sys.argv[4]))
        with socket.create_connection((host, port), timeout=120) as conn:
            conn.sendall(data)
            conn.shutdown(socket.SHUT_WR)
            conn.recv(1)  # the sink closes once it has read everything
        digest, n = hashlib.sha256(data), len(data)
    print(n, digest.hexdigest(), flush=True)
""")


def tcp_transfer(client: SideConfig, server: SideConfig, workdir: Path,
                 size: int = 200_000) -> tuple[str, str]:
    """A TCP transfer of ``size`` random octets; (what the client sent, what the server
    received), each as "octets sha256"."""
    script = workdir / "tcp_transfer.py"
    script.write_text(TCP_TRANSFER)
    log = workdir / f"sink-{server.name}.log"
    sink = spawn([sys.executable, str(script), "sink", server.address, "5001"], server.netns,
                 log)
    try:
        deadline = time.monotonic() + 20
        while ":5001" not in run(["ss", "-ltnH"], netns=server.netns).stdout:
            assert sink.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        sent = run([sys.executable, str(script), "send", server.address, "5001", str(size)],
                   netns=client.netns, timeout=150).stdout.strip()
        assert sink.wait(timeout=30) == 0, log.read_text()
        return sent, log.read_text().strip()
    finally:
        stop_group(sink)


def quiet(read: Callable[[], dict[str, int]], timeout: float = 20) -> dict[str, int]:
    """Counters once they have not moved for a second."""
    deadline = time.monotonic() + timeout
    last = read()
    while time.monotonic() < deadline:
        time.sleep(1)
        now = read()
        if now == last:
            return now
        last = now
    return last


@pytest.mark.root
@pytest.mark.parametrize("suite", SUITES)
@pytest.mark.parametrize("direction", ["kernel-a", "kernel-b"])
def test_kernel_and_userspace_interoperate(direction: str, suite: str, tmp_path: Path,
                                           comparison_file: Path) -> None:
    if not kernel_macsec_available():
        pytest.skip(NO_KERNEL_MACSEC)
    rid = "mx" + secrets.token_hex(3)
    # a replay window: the kernel's GCM is asynchronous where it has no synchronous AES
    # (the lab VM: gcm_base(ctr(aes-generic),ghash-clmulni), whose GHASH goes through
    # cryptd), so a frame can leave after the next one; with window 0 the userspace SecY
    # counted one such frame InPktsLate (1 of 280). Interoperation is what is tested
    # here; strict replay protection is the attack tests'
    cfg = dataclasses.replace(LinkConfig.generate(rid, suite=suite),
                              replay_window=INTEROP_WINDOW)
    kernel_side = direction[-1]
    user_side = cfg.peer(kernel_side).name
    with MixedLink(cfg, tmp_path / "link", kernel_side=kernel_side) as link:
        for src, dst in ((cfg.a, cfg.b), (cfg.b, cfg.a)):
            out = run(["ping", "-c", "3", "-i", "0.2", "-W", "10", dst.address],
                      netns=src.netns, check=False, timeout=60).stdout
            assert " 0% packet loss" in out, out
        for client, server in ((cfg.a, cfg.b), (cfg.b, cfg.a)):
            sent, received = tcp_transfer(client, server, tmp_path)
            assert sent == received and sent.startswith("200000 "), (sent, received)
        k = quiet(lambda: link.counters(kernel_side))
        u = link.counters(user_side)
    record(comparison_file, f"interop {direction} {suite}", {"kernel": k, "userspace": u})
    assert leftovers(f"tb{rid}") == []
    for c in (k, u):
        assert all(c[name] == 0 for name in DROPS), c
    assert k["OutPktsEncrypted"] == u["InPktsOK"] >= 100, (k, u)
    assert u["OutPktsEncrypted"] == k["InPktsOK"] >= 100, (k, u)
    assert k["OutOctetsEncrypted"] == u["InOctetsDecrypted"] > 200_000, (k, u)
    assert u["OutOctetsEncrypted"] == k["InOctetsDecrypted"] > 200_000, (k, u)
