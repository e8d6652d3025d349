"""FRR config rendering from the templates, and the vtysh dry run."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from testbed.backbone.frr import (
    DAEMONS,
    Bfdd,
    Bgpd,
    BgpNeighbor,
    FrrConfigError,
    Ospfd,
    Router,
    RouterInterface,
    RouterPaths,
    Timers,
    Zebra,
)

ROUTER = Router("nyc", "tbdemonyc", "10.255.0.1",
                (RouterInterface("tbdemol0a", cost=28), RouterInterface("tbdemol1a", cost=2),
                 RouterInterface("lo", passive=True)),
                Timers(bfd_ms=100, bfd_multiplier=3, hello_s=1, dead_s=3, spf_max_ms=500))


def test_start_order_follows_dependencies():
    for i, daemon in enumerate(DAEMONS):
        assert all(DAEMONS.index(dep) < i for dep in daemon.DEPENDS)


def test_ospfd_render(tmp_path):
    text = Ospfd(ROUTER, RouterPaths(tmp_path)).render()
    assert "ospf router-id 10.255.0.1" in text
    assert "timers throttle spf 0 50 500" in text
    assert "maximum-paths 8" in text
    assert text.count("ip ospf bfd profile backbone") == 2
    assert text.count("ip ospf network point-to-point") == 2
    assert "interface lo\n ip ospf area 0\n ip ospf passive" in text
    assert text.count("ip ospf retransmit-interval 5\n") == 2  # FRR's default, unless set
    assert "$" not in text
    quick = dataclasses.replace(ROUTER, timers=ROUTER.timers.model_copy(
        update={"retransmit_s": 1}))
    assert Ospfd(quick, RouterPaths(tmp_path)).render().count("retransmit-interval 1\n") == 2


def test_bfdd_and_zebra_render(tmp_path):
    bfd = Bfdd(ROUTER, RouterPaths(tmp_path)).render()
    assert "receive-interval 100" in bfd and "transmit-interval 100" in bfd
    assert "detect-multiplier 3" in bfd
    assert "hostname nyc" in Zebra(ROUTER, RouterPaths(tmp_path)).render()


def test_argv_uses_run_folder_paths(tmp_path):
    paths = RouterPaths(tmp_path / "nyc")
    argv = Ospfd(ROUTER, paths).argv()
    assert argv[argv.index("-z") + 1] == str(paths.zserv)
    assert argv[argv.index("--vty_socket") + 1] == str(tmp_path / "nyc")
    assert argv[argv.index("-i") + 1] == str(tmp_path / "nyc" / "ospfd.pid")
    assert argv[argv.index("-P") + 1] == "0"


needs_frr = pytest.mark.skipif(shutil.which("vtysh") is None or not Path("/usr/lib/frr").exists()
                               or not shutil.which("chown"), reason="FRR is not installed")


@pytest.mark.root
@needs_frr
def test_dry_run_accepts_rendered_configs(tmp_path):
    for cls in DAEMONS:
        daemon = cls(ROUTER, RouterPaths(tmp_path))
        daemon.write()
        daemon.dry_run()


@pytest.mark.root
@needs_frr
def test_dry_run_rejects_a_broken_config(tmp_path):
    class Broken(Ospfd):
        def render(self) -> str:
            return super().render().replace("maximum-paths 8", "maximum-paths eight")

    daemon = Broken(ROUTER, RouterPaths(tmp_path))
    daemon.write()
    with pytest.raises(FrrConfigError, match="maximum-paths eight"):
        daemon.dry_run()


def test_regions_are_stub_routers_pops_are_transit():
    from testbed.backbone.frr.ospfd import Ospfd
    from testbed.backbone.frr.router import Router, RouterInterface, RouterPaths, Timers

    def render(transit: bool) -> str:
        r = Router("r", "tbdemor", "10.255.0.9", (RouterInterface("lo", passive=True),),
                   Timers(), transit=transit)
        return Ospfd(r, RouterPaths(Path("/tmp"))).render()

    assert "max-metric router-lsa administrative" in render(transit=False)
    assert "max-metric" not in render(transit=True)


BGP_ROUTER = Router("ra", "tbdemora", "10.255.1.1",
                    (RouterInterface("tbdemol0b"), RouterInterface("lo", passive=True)),
                    Timers(bfd_ms=100, hello_s=1, dead_s=3), transit=False, asn=64520,
                    neighbors=(BgpNeighbor("10.1.0.1", 64512, "tbdemol0b"),),
                    networks=("10.255.1.1/32", "172.16.0.0/24"))


@pytest.mark.root
@needs_frr
@pytest.mark.parametrize("transit", [True, False])
def test_bgpd_config_passes_the_dry_run(tmp_path, transit):
    from dataclasses import replace

    daemon = Bgpd(replace(BGP_ROUTER, transit=transit), RouterPaths(tmp_path))
    daemon.write()
    daemon.dry_run()


def test_bgp_without_bfdd_has_no_bfd_lines():
    from dataclasses import replace

    text = Bgpd(replace(BGP_ROUTER, bfd=False), RouterPaths(Path("/tmp"))).render()
    assert "bfd" not in text and "remote-as 64512" in text
    ospf = Ospfd(replace(ROUTER, bfd=False), RouterPaths(Path("/tmp"))).render()
    assert "bfd" not in ospf


@pytest.mark.parametrize("daemons, words", [
    (["bfdd", "ospfd"], "needs zebra"),
    (["zebra", "bfdd"], "exactly one routing protocol"),
    (["zebra", "ospfd", "bgpd"], "exactly one routing protocol"),
    (["zebra", "zebra", "ospfd"], "twice"),
    (["zebra", "isisd"], "must be one of"),
])
def test_daemon_lists_are_checked(daemons, words):
    from testbed.errors import ConfigError
    from testbed.experiments.backbone.schema import validate

    with pytest.raises(ConfigError) as err:
        validate({"topology": "small", "daemons": daemons})
    assert err.value.field.startswith("backbone.daemons") and words in err.value.reason


def test_daemon_list_is_put_in_start_order():
    from testbed.experiments.backbone.schema import validate

    assert validate({"topology": "small", "daemons": ["bgpd", "zebra"]})["daemons"] == [
        "zebra", "bgpd"]
