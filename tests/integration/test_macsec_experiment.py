"""Root test: the MACsec scenario end to end, short, into a temporary folder.

Runs the macsec kind (:func:`testbed.core.runner.run_section`) for 5 s with small attack counts and
checks the summary contract, the attack accounting, the capture (our SecY,
Scapy and tshark) and that nothing named after the run is left behind.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from testbed.core.runner import run_section
from testbed.host.naming import new_run_id, run_dir, run_prefix
from testbed.macsec.decrypt import decrypt_pcap, fingerprint, keys_from
from testbed.macsec.netns import leftovers

pytestmark = [pytest.mark.root, pytest.mark.shares_host]

SECTION = {"backend": "userspace", "link_mbps": 20, "replay_window": 256, "bulk_seconds": 3,
           "chain_concurrency": 4, "rotate_at_s": 1.5,
           "attack": {"tampered": 4, "replayed": 3, "untagged": 5, "at_s": 2.5}}
CONTRACT = {"name", "fabric", "agents", "training", "bulk"}


@pytest.fixture(scope="module")
def result(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path, str]:
    out = tmp_path_factory.mktemp("macsec")
    run_id = new_run_id()
    lines: list[str] = []
    res = run_section("macsec", SECTION, out, duration_s=5, seed=3, run_id=run_id,
                      progress=lines.append)
    (out / "progress.log").write_text("\n".join(lines))
    return res, out, run_id


def test_runs_have_the_contract_keys(result: tuple[dict, Path, str]) -> None:
    res, _, _ = result
    assert [r["name"] for r in res["runs"]] == ["unprotected", "protected"]
    for entry in res["runs"]:
        assert CONTRACT <= set(entry)
        assert {"switches", "hosts", "links", "start_s", "stop_s"} <= set(entry["fabric"])
        assert entry["agents"]["chains_completed"] > 0
        assert set(entry["agents"]["latency_ms"]) >= {"p50", "p95", "p99", "max"}
        assert entry["training"]["bytes"] == 0
        assert entry["bulk"]["goodput_mbps"] > 1
    json.dumps(res)  # all JSON-able


def test_attack_was_counted_and_nothing_delivered(result: tuple[dict, Path, str]) -> None:
    m = result[0]["macsec"]
    attack = m["attack"]
    assert (attack["tampered_sent"], attack["replayed_sent"], attack["untagged_sent"]) == (4, 3, 5)
    assert attack["replayed_in_window"] == 0, attack  # each replay older than the window
    assert attack["delivered_to_tap"] == 0
    assert attack["accounting_exact"], attack
    c = attack["counters_b"]
    assert c["InPktsNotValid"] >= 4 and c["InPktsLate"] >= 3 and c["InPktsNoTag"] >= 5
    assert m["throughput_mbps"]["ratio"] > 0.5
    assert [r["an"] for r in m["rotations"]] == [1]
    assert set(m["links"][0]["sides"]) == {"a", "b"}


def test_the_attacker_replays_frames_from_the_start_of_the_traffic(
        result: tuple[dict, Path, str]) -> None:
    """The attacker captures before the traffic starts, so the frames it replays are among
    the first ones a sent (an attacker that began late replayed PNs 1,810-1,812 on a
    quiet host), from the SA in use at the injection time (AN 1, after the rotation), once
    it has carried more than the window's frames since them."""
    _, out, _ = result
    sent = json.loads((out / "variants" / "protected" / "attack.json").read_text())
    assert sent["replayed_pns"] and max(sent["replayed_pns"]) < SECTION["replay_window"], sent
    assert sent["replayed_an"] == 1 and sent["replayed_in_window"] == 0, sent


def test_capture_decrypts_with_the_keys_the_summary_names(result: tuple[dict, Path, str]) -> None:
    """summary.json names the key file and holds each key's fingerprint, never a key; the
    key file (its owner's alone) decrypts the capture."""
    res, out, _ = result
    ref = res["macsec"]["keys"]
    keys = keys_from(res, out)
    assert keys == json.loads((out / ref["file"]).read_text())
    assert (out / ref["file"]).stat().st_mode & 0o077 == 0
    sides = keys["links"][0]["sides"]
    assert set(sides["a"]["keys"]) == {"0", "1"}  # the initial AN and the rotated one
    assert ref["links"][0]["sides"]["a"]["fingerprints"] == {
        an: fingerprint(k) for an, k in sides["a"]["keys"].items()}
    for name in ("summary.json", "manifest.json"):
        text = (out / name).read_text()
        for side in sides.values():
            assert not [k for k in side["keys"].values() if k in text], name
    ok, failed = decrypt_pcap(out / res["macsec"]["wire_pcap"], keys)
    assert ok > 100 and failed == res["macsec"]["attack"]["tampered_sent"]


def test_scapy_decrypts_a_captured_frame(result: tuple[dict, Path, str]) -> None:
    from scapy.contrib.macsec import MACsec, MACsecSA
    from scapy.utils import PcapReader

    res, out, _ = result
    side = keys_from(res, out)["links"][0]["sides"]["a"]
    sci = bytes.fromhex(side["sci"])
    with PcapReader(str(out / "wire.pcap")) as reader:
        for pkt in reader:
            if MACsec in pkt and pkt[MACsec].SC and bytes(pkt[MACsec].SCI) == sci:
                break
        else:
            pytest.fail("no MACsec frame from side a in wire.pcap")
    an = pkt[MACsec].AN
    sa = MACsecSA(sci=sci, an=an, pn=pkt[MACsec].PN, key=bytes.fromhex(side["keys"][str(an)]),
                  icvlen=16, encrypt=1, send_sci=1)
    plain = sa.decap(sa.decrypt(pkt))
    assert plain.type in (0x0800, 0x0806)


def test_tshark_dissects_macsec(result: tuple[dict, Path, str]) -> None:
    _, out, _ = result
    proc = subprocess.run(["tshark", "-r", str(out / "wire.pcap"), "-Y", "macsec",
                           "-T", "fields", "-e", "macsec.AN", "-e", "macsec.PN"],
                          capture_output=True, text=True, timeout=60)
    rows = [r for r in proc.stdout.splitlines() if r.strip()]
    assert len(rows) > 100, proc.stderr
    assert {r.split("\t")[0] for r in rows} >= {"0x00", "0x01"}  # both ANs (rotation)


def test_nothing_left_behind(result: tuple[dict, Path, str]) -> None:
    _, _, run_id = result
    prefix = run_prefix(run_id)
    assert leftovers(prefix) == []
    assert not run_dir(run_id).exists()
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert not [line for line in ps.splitlines() if prefix in line]

