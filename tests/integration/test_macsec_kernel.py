"""Kernel backend: the probe, backend choice, counter parsing, and a link where available."""

from __future__ import annotations

import secrets
import time
from pathlib import Path

import pytest

from testbed.macsec.config import LinkConfig
from testbed.macsec.kernel import (
    KernelMacsecLink,
    create_link,
    kernel_macsec_available,
    parse_ip_macsec_stats,
)
from testbed.macsec.link import UserspaceLink
from testbed.macsec.netns import leftovers, run
from testbed.macsec.secy import SecYCounters

pytestmark = pytest.mark.vm

IP_S_MACSEC = """\
11: tbm0: protect on validate strict sc off sa off encrypt on send_sci on end_station off \
scb off replay off
    cipher suite: GCM-AES-128, using ICV length 16
    TXSC: 0274620000010001 on SA 0
    stats: OutPktsUntagged InPktsUntagged OutPktsTooLong InPktsNoTag InPktsBadTag \
InPktsUnknownSCI InPktsNoSCI InPktsOverrun
                         0              0              0           7            2 \
               0           1             0
        stats: OutPktsProtected OutPktsEncrypted OutOctetsProtected OutOctetsEncrypted
                              0               12                  0               1200
        0: PN 13, state on, key 00000000000000000000000000000000
            stats: OutPktsProtected OutPktsEncrypted
                                  0               12
    RXSC: 0274620000020001, state on
        stats: InOctetsValidated InOctetsDecrypted InPktsUnchecked InPktsDelayed InPktsOK \
InPktsInvalid InPktsLate InPktsNotValid InPktsNotUsingSA InPktsUnusedSA
                               0              1100               0             0       11 \
            0          3              4                0              0
        0: PN 12, state on, key 01000000000000000000000000000000
            stats: InPktsOK InPktsInvalid InPktsNotValid InPktsNotUsingSA InPktsUnusedSA
                         11             0              4                0              0
"""


def test_parse_ip_macsec_stats_uses_same_names() -> None:
    text = IP_S_MACSEC.replace("\\\n", "")
    c = parse_ip_macsec_stats(text)
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
        assert " 0% packet loss" in run(["ping", "-c", "3", cfg.b.address],
                                        netns=cfg.a.netns).stdout
        ca, cb = link.counters("a"), link.counters("b")
        assert set(ca) == set(SecYCounters().as_dict())
        assert ca["OutPktsEncrypted"] == cb["InPktsOK"] >= 6
    assert leftovers("tbmk") == []
