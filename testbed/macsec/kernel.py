"""Kernel MACsec backend (``ip macsec``) with the same config model and counters.

:func:`kernel_macsec_available` probes by creating (and deleting) a macsec
link in a throw-away namespace; :func:`create_link` picks the kernel backend
where it works and the userspace one elsewhere. On a kernel without the
macsec module only the probe runs; the rest is exercised where it exists.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from types import TracebackType

from .config import LinkConfig
from .errors import BackendError, ConfigError
from .link import UserspaceLink, Wire, direct_wire
from .netns import (
    add_netns,
    close_uncontrolled_port,
    del_netns,
    link_stats,
    no_ipv6,
    run,
    run_batch,
)
from .secy import SecYCounters

log = logging.getLogger(__name__)

_SECY_NAMES = {"OutPktsUntagged", "InPktsUntagged", "OutPktsTooLong", "InPktsNoTag",
               "InPktsBadTag", "InPktsUnknownSCI", "InPktsNoSCI", "InPktsOverrun"}
_TXSC_NAMES = {"OutPktsProtected", "OutPktsEncrypted", "OutOctetsProtected",
               "OutOctetsEncrypted"}
_RXSC_NAMES = {"InOctetsValidated", "InOctetsDecrypted", "InPktsUnchecked", "InPktsDelayed",
               "InPktsOK", "InPktsInvalid", "InPktsLate", "InPktsNotValid", "InPktsNotUsingSA",
               "InPktsUnusedSA"}


def kernel_macsec_available() -> bool:
    """True when this kernel can create a macsec link (probed in a temporary namespace)."""
    ns = f"tbkp{os.getpid() % 1000000}"
    try:
        add_netns(ns)
        run(["ip", "link", "add", "tbkpd0", "type", "dummy"], netns=ns)
        run(["ip", "link", "add", "link", "tbkpd0", "name", "tbkpm0", "type", "macsec"],
            netns=ns)
        run(["ip", "link", "del", "tbkpm0"], netns=ns)
        return True
    except BackendError as exc:
        log.info("kernel MACsec unavailable: %s", exc)
        return False
    finally:
        del_netns(ns)


def parse_ip_macsec_stats(text: str) -> dict[str, int]:
    """Sum ``ip -j -s macsec show`` (JSON) into :class:`SecYCounters` names.

    Each device's object holds its SecY and transmit-SC counters; its ``rx_sc`` list
    holds each receive SC's, which are summed; per-SA counters (``sa_list``) are
    skipped, as in the userspace SecY's flat counters.

    >>> parse_ip_macsec_stats('[{"ifname": "m0", "OutPktsEncrypted": 3, "InPktsNoTag": 1,'
    ...     ' "sa_list": [{"an": 0, "OutPktsEncrypted": 3}],'
    ...     ' "rx_sc": [{"InPktsOK": 2, "sa_list": [{"InPktsOK": 2}]}, {"InPktsOK": 5}]}]')[
    ...     "InPktsOK"]
    7
    """
    counters = SecYCounters().as_dict()
    for device in json.loads(text or "[]"):
        for name in _SECY_NAMES | _TXSC_NAMES:
            counters[name] += int(device.get(name, 0))
        for sc in device.get("rx_sc", ()):
            for name in _RXSC_NAMES:
                counters[name] += int(sc.get(name, 0))
    return counters


def macsec_stats_argv(tap: str) -> list[str]:
    """The command whose output :func:`parse_ip_macsec_stats` reads."""
    return ["ip", "-j", "-s", "macsec", "show", tap]


def _sa_args(cfg: LinkConfig, ssci: int) -> list[str]:
    """First PN, state, and for XPN the SSCI and salt: XPN takes its 64-bit first PN as
    ``xpn`` (the kernel refuses a 32-bit ``pn`` for an XPN SecY with EINVAL)."""
    if cfg.cipher_suite.xpn:
        return ["xpn", "1", "on", "ssci", f"{ssci:08x}", "salt", cfg.salt]
    return ["pn", "1", "on"]


def secy_commands(cfg: LinkConfig, side: str) -> list[list[str]]:
    """The ``ip`` commands that put side ``side``'s macsec device on its veth.

    Run inside the side's namespace, after the veth exists, through ``ip -batch`` on
    standard input (:func:`~testbed.macsec.netns.run_batch`: the SAKs are in them): MAC
    and MTU of the veth (MTU + 32 for SecTAG and ICV), the macsec device named ``tap``
    with its transmit SAs and the peer's receive SC and SAs, then its MTU, address and up.

    >>> cfg = LinkConfig.generate("d1")
    >>> [" ".join(argv[1:4]) for argv in secy_commands(cfg, "a")][:3]
    ['link set tbd1va', 'link add link', 'macsec add tbd1ta']
    >>> xpn = LinkConfig.generate("d2", suite="gcm-aes-xpn-128")
    >>> secy_commands(xpn, "b")[2][5:12]
    ['sa', '0', 'xpn', '1', 'on', 'ssci', '00000002']
    """
    me, peer = cfg.side(side), cfg.peer(side)
    out = [["ip", "link", "set", me.veth, "address", me.mac, "mtu", str(cfg.mtu + 32), "up"],
           ["ip", "link", "add", "link", me.veth, "name", me.tap, "type", "macsec",
            "sci", me.sci, "cipher", cfg.suite, "encrypt", "on" if cfg.encrypt else "off",
            "validate", cfg.validate, "replay", "on" if cfg.replay_protect else "off",
            "window", str(cfg.replay_window), "encodingsa", str(cfg.initial_an)]]
    for an, key in me.keys.items():
        out.append(["ip", "macsec", "add", me.tap, "tx", "sa", str(an),
                    *_sa_args(cfg, me.ssci), "key", f"{an:02x}", key])
    out.append(["ip", "macsec", "add", me.tap, "rx", "sci", peer.sci, "on"])
    for an, key in peer.keys.items():
        out.append(["ip", "macsec", "add", me.tap, "rx", "sci", peer.sci, "sa", str(an),
                    *_sa_args(cfg, peer.ssci), "key", f"{an:02x}", key])
    out += [["ip", "link", "set", me.tap, "mtu", str(cfg.mtu), "up"],
            ["ip", "addr", "add", me.ip, "dev", me.tap]]
    return out


def kernel_counters(cfg: LinkConfig, side: str) -> dict[str, int]:
    """The counters of side ``side``'s macsec device, with the userspace SecY's names."""
    s = cfg.side(side)
    return parse_ip_macsec_stats(run(macsec_stats_argv(s.tap), netns=s.netns).stdout)


class KernelMacsecLink:
    """The same link as :class:`UserspaceLink`, with kernel macsec devices.

    The macsec device takes the config's ``tap`` name (it carries the IP), on
    top of the veth.
    """

    backend = "kernel"

    def __init__(self, config: LinkConfig, workdir: Path | str,
                 wire: Wire | None = None) -> None:
        self.config = config
        self.wire = wire or direct_wire
        self.workdir = Path(workdir)
        self.tx_an = config.initial_an

    def __enter__(self) -> KernelMacsecLink:
        self.start()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def start(self) -> None:
        """Create namespaces, veth and macsec devices with their SAs."""
        cfg = self.config
        try:
            for side in (cfg.a, cfg.b):
                add_netns(side.netns)
                no_ipv6(side.netns)  # as the userspace link: IPv4 only, no autoconf frames
                close_uncontrolled_port(side.netns)
            self.wire(cfg)
            for s in "ab":
                for argv in secy_commands(cfg, s):  # one ip each, as before: errors name it
                    run_batch([argv], netns=cfg.side(s).netns)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Delete both namespaces (and with them every device)."""
        for side in (self.config.a, self.config.b):
            del_netns(side.netns)

    def counters(self, side: str) -> dict[str, int]:
        """SecY counters of one side, with the userspace backend's names."""
        return kernel_counters(self.config, side)

    def tap_stats(self, side: str) -> dict[str, int]:
        """Kernel counters of the macsec device of a side."""
        s = self.config.side(side)
        return link_stats(s.tap, s.netns)

    def rotate(self, keys: dict[str, str] | None = None) -> int:
        """Next AN with new SAKs: receive SAs first, then the transmit switch."""
        new_an = (self.tx_an + 1) % 4
        keys = keys or {s: os.urandom(self.config.cipher_suite.key_len).hex() for s in "ab"}
        for s in "ab":
            me, peer = self.config.side(s), self.config.peer(s)
            run_batch([["ip", "macsec", "add", peer.tap, "rx", "sci", me.sci, "sa", str(new_an),
                        *_sa_args(self.config, me.ssci), "key", f"{new_an:02x}", keys[s]]],
                      netns=peer.netns)
        for s in "ab":
            me = self.config.side(s)
            run_batch([["ip", "macsec", "add", me.tap, "tx", "sa", str(new_an),
                        *_sa_args(self.config, me.ssci), "key", f"{new_an:02x}", keys[s]]],
                      netns=me.netns)
            run(["ip", "link", "set", me.tap, "type", "macsec", "encodingsa", str(new_an)],
                netns=me.netns)
        self.tx_an = new_an
        return new_an


class MixedLink(UserspaceLink):
    """One link, two implementations: Linux's macsec device at ``kernel_side``, our
    userspace SecY (forwarder behind a TAP) at the other end, from one config.

    Both ends follow 802.1AE, so they must interoperate: frames one protects, the
    other validates, and each end's transmit counters match the other's receive
    counters. Key rotation is not offered (the two ends rotate differently).
    """

    backend = "mixed"

    def __init__(self, config: LinkConfig, workdir: Path | str, kernel_side: str = "a",
                 wire: Wire | None = None) -> None:
        super().__init__(config, workdir, wire=wire)
        self.kernel_side = config.side(kernel_side).name
        self.userspace_sides = config.peer(kernel_side).name

    def _build_namespaces(self) -> None:
        super()._build_namespaces()  # both namespaces, the wire, the userspace end's TAP
        for argv in secy_commands(self.config, self.kernel_side):
            run_batch([argv], netns=self.config.side(self.kernel_side).netns)

    def counters(self, side: str) -> dict[str, int]:
        """SecY counters of either end, under the same names."""
        if self.config.side(side).name == self.kernel_side:
            return kernel_counters(self.config, side)
        return super().counters(side)

    def rotate(self, keys: dict[str, str] | None = None) -> int:
        """Not offered on a mixed link."""
        raise ConfigError("a mixed link does not rotate keys")


def create_link(config: LinkConfig, workdir: Path | str, backend: str = "auto",
                wire: Wire | None = None) -> UserspaceLink | KernelMacsecLink:
    """A protected link: ``kernel``, ``userspace``, or ``auto`` (kernel where available).

    ``wire`` builds the veths between the namespaces (a direct veth pair by default).
    """
    if backend == "auto":
        backend = "kernel" if kernel_macsec_available() else "userspace"
    if backend == "kernel":
        return KernelMacsecLink(config, workdir, wire=wire)
    if backend == "userspace":
        return UserspaceLink(config, workdir, wire=wire)
    raise ConfigError(f"unknown MACsec backend {backend!r}")
