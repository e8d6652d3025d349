"""The backbone's MACsec settings, per-link configs and keys (no root needed)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from testbed.backbone import secure
from testbed.backbone.net import BackboneNet
from testbed.errors import BringUpError, ConfigError
from testbed.experiments.backbone.schema import macsec_backend, validate
from testbed.host.nft import port_loss_rules as wire_loss_rules
from testbed.macsec.decrypt import decrypt_frame, receivers
from testbed.macsec.forwarder import build_secy
from topologies.backbone import default_backbone, small_backbone

FAULT = [{"at_s": 5, "action": "cut_link", "target": "nyc-ams"}]


@pytest.mark.parametrize(("value", "field"), [
    ("yes", "backbone.macsec"),
    ({"cipher": "aes-ccm"}, "backbone.macsec.cipher"),
    ({"backend": "hardware"}, "backbone.macsec.backend"),
    ({"enabled": "on"}, "backbone.macsec.enabled"),
    ({"replay_window": -1}, "backbone.macsec.replay_window"),
    ({"mtu": 100}, "backbone.macsec.mtu"),
    ({"mtu": 1500.5}, "backbone.macsec.mtu"),
    ({"keys": "x"}, "backbone.macsec.keys"),
])
def test_bad_macsec_settings_name_the_field(value, field):
    with pytest.raises(ConfigError) as err:
        validate({"macsec": value, "faults": FAULT})
    assert str(err.value).startswith(field + ":")


def test_macsec_defaults_and_forms():
    assert validate({"faults": FAULT})["macsec"]["enabled"] is False
    assert validate({"macsec": True})["macsec"] == {**secure.DEFAULTS, "enabled": True}
    cfg = validate({"macsec": {"cipher": "GCM-AES-XPN-256", "backend": "userspace"}})["macsec"]
    assert cfg["enabled"] and cfg["cipher"] == "gcm-aes-xpn-256"
    assert validate({"macsec": {"enabled": False}})["macsec"]["enabled"] is False


def test_backend_follows_the_probe():
    on, off = SimpleNamespace(macsec=True), SimpleNamespace(macsec=False)
    auto = secure.validate(True)
    assert macsec_backend(auto, on) == "kernel"
    assert macsec_backend(auto, off) == "userspace"
    assert macsec_backend({**auto, "backend": "userspace"}, on) == "userspace"
    with pytest.raises(BringUpError, match="kernel MACsec is not available"):
        macsec_backend({**auto, "backend": "kernel"}, off)


def _net(bb, cipher="gcm-aes-128") -> BackboneNet:
    settings = {**secure.DEFAULTS, "enabled": True, "cipher": cipher}
    return BackboneNet(bb, "tb1a2b", Path("/nonexistent"), stack=None,  # type: ignore[arg-type]
                       macsec=settings, macsec_backend="userspace")


def test_every_link_gets_its_own_keys_names_and_addresses():
    net = _net(default_backbone())
    cfgs = net.secure.configs
    assert len(cfgs) == len(default_backbone().all_links) == 29
    keys = [k for c in cfgs.values() for s in "ab" for k in c.side(s).keys.values()]
    scis = [c.side(s).sci for c in cfgs.values() for s in "ab"]
    assert len(set(keys)) == len(keys) and len(set(scis)) == len(scis)
    for name, cfg in cfgs.items():
        for s in "ab":
            side = cfg.side(s)
            # FRR and the analysis keep the unencrypted names; the wire is a new veth
            assert side.tap == net.ifname(name, s) and side.veth == net.wire(name, s)
            assert side.ip == f"{net.link_addr(name, s)}/30"
            assert len(side.veth) <= 15
        assert cfg.mtu == 1500 and net.secure.wire_mtu == 1532
    assert net.phys("nyc-ams", "a") == net.wire("nyc-ams", "a")


def test_userspace_commands_build_a_tap_on_every_wire():
    net = _net(small_backbone())
    cmds = net.secure.commands()
    for name in net.links:
        for s in "ab":
            assert ("tuntap", "add", "dev", net.ifname(name, s), "mode", "tap") in \
                [c.argv for c in cmds]
            assert ("link", "set", net.wire(name, s), "mtu", "1532", "up") in \
                [c.argv for c in cmds]
    assert not any(c.secret for c in cmds)


def test_kernel_commands_put_macsec_on_the_wire():
    net = _net(small_backbone())
    net.secure.backend = "kernel"
    cmds = net.secure.commands()
    name = next(iter(net.links))
    assert any(c.argv[:7] == ("link", "add", "link", net.wire(name, "a"), "name",
                              net.ifname(name, "a"), "type") for c in cmds)
    keyed = [c for c in cmds if "key" in c.argv]
    assert keyed and all(c.secret for c in keyed)  # keys reach ip on stdin only
    assert not any(c.secret for c in cmds if "key" not in c.argv)


@pytest.mark.parametrize("cipher", ["gcm-aes-128", "gcm-aes-xpn-256"])
def test_recorded_keys_decrypt_what_a_link_end_sends(cipher):
    net = _net(small_backbone(), cipher)
    cfg = net.secure.configs["p1-p2-1"]
    frame = bytes.fromhex("02746200000202746200000108004500001c0000400040010000"
                          "0a0101010a010102") + bytes(20)
    wire = build_secy(cfg, "a").protect(frame)
    assert wire[12:14] == b"\x88\xe5" and frame[14:] not in wire
    assert decrypt_frame(receivers(net.secure.keys()), wire) == frame


def test_wire_loss_hooks_the_wire_egress():
    rules = wire_loss_rules("tb1a2bloss0", "tb1a2bw0a", 0.1)
    assert "table netdev tb1a2bloss0" in rules and 'device "tb1a2bw0a"' in rules
    assert "< 100 drop" in rules


def test_totals_and_report_lines():
    from testbed.experiments.backbone.report import _macsec_lines

    counters = {"l": {"a": {"InPktsOK": 5, "InPktsNotValid": 0},
                      "b": {"InPktsOK": 7, "InPktsLate": 1}}}
    totals = secure.totals(counters)
    assert totals == {"InPktsOK": 12, "InPktsNotValid": 0, "InPktsLate": 1}
    macsec = {"enabled": True, "cipher": "gcm-aes-128", "backend": "userspace", "mtu": 1500,
              "variants": {"fast": {"totals": totals, "forwarder_cpu_s": {"p1": 1.5},
                                    "forwarder_cpu_total_s": 1.5,
                                    "wire_sample": {"frames": 3, "link": "l",
                                                    "ethertypes": {"0x88e5": 3},
                                                    "decrypted": 3}}}}
    text = "\n".join(_macsec_lines(macsec))
    assert "| fast | 12 | 0 | 1 | 0 | 0 | 1.5 |" in text and "0x88e5: 3" in text
    assert "not encrypted" in _macsec_lines({"enabled": False})[0]
