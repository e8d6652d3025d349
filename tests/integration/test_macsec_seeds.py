"""MACsec over several seeds: every seed's protected run has keys of its own.

(In its own module, after tests/integration/test_macsec_link.py: its four variants' namespaces
are torn down by the kernel in the background, which must not load the host while the
link tests judge a key rotation frame by frame.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from testbed.macsec.decrypt import decrypt_pcap

from .test_macsec_experiment import SECTION

pytestmark = pytest.mark.root


def test_no_nonce_repeats_across_seeds(tmp_path: Path) -> None:
    """Two seeds, each protected run with a key rotation: every seed's capture decodes
    with its own keys, and no (SAK, SCI, PN) is seen twice over both (the attacker is
    off: a replayed frame repeats a nonce on purpose)."""
    from testbed.core.runner import run
    from testbed.core.scenario import parse as parse_scenario
    from testbed.macsec.frame import is_macsec, parse
    from traffic.pcapfile import read_frames

    section = {**SECTION, "bulk_seconds": 1.5,
               "attack": {"tampered": 0, "replayed": 0, "untagged": 0, "at_s": 2}}
    sc = parse_scenario({"name": "macsec-seeds", "seeds": [1, 2], "duration_s": 3,
                         "macsec": section})
    res = run(sc, tmp_path, lambda _line: None)
    m = res["macsec"]
    assert [c["seed"] for c in m["captures"]] == [1, 2]
    assert [r["seed"] for r in m["rotations"]] == [1, 2]  # each seed rotates once
    seen: dict[tuple[bytes, bytes, int], int] = {}
    saks_by_seed = []
    for capture in m["captures"]:
        keys = json.loads((tmp_path / capture["keys_file"]).read_text())
        ok, failed = decrypt_pcap(tmp_path / capture["wire_pcap"], keys)
        assert ok > 50 and failed == 0, capture
        sides = keys["links"][0]["sides"].values()
        by_sci = {bytes.fromhex(s["sci"]): {int(an): bytes.fromhex(k)
                                             for an, k in s["keys"].items()} for s in sides}
        by_mac = {bytes.fromhex(s["mac"].replace(":", "")): bytes.fromhex(s["sci"])
                  for s in sides}
        saks_by_seed.append({k for saks in by_sci.values() for k in saks.values()})
        for frame in read_frames(tmp_path / capture["wire_pcap"]):
            if not is_macsec(frame):
                continue
            tag = parse(frame).tag
            sci = tag.sci or by_mac[frame[6:12]]
            nonce = (by_sci[sci][tag.an], sci, tag.pn)
            assert nonce not in seen, (capture["seed"], seen.get(nonce), tag)
            seen[nonce] = capture["seed"]
    assert len(seen) > 100
    assert not saks_by_seed[0] & saks_by_seed[1]  # no SAK of seed 1 in seed 2
    keys_all = json.loads((tmp_path / "macsec-keys.json").read_text())
    assert len(keys_all["links"]) == 2
    for capture in m["captures"]:  # key files: their owner's alone
        assert (tmp_path / capture["keys_file"]).stat().st_mode & 0o077 == 0
    assert (tmp_path / "macsec-keys.json").stat().st_mode & 0o077 == 0
    assert (tmp_path / "wire.pcap").resolve() == (tmp_path / m["wire_pcap"]).resolve()
