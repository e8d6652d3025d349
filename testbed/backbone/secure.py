"""MACsec on the backbone links: every link is a protected link between two routers.

Each link end has two interfaces in its router's namespace: the wire (a veth,
``<prefix>w<i><side>``) that carries only 802.1AE frames, and the protected
interface (``<prefix>l<i><side>``, the name an unencrypted backbone gives the veth)
with the link address, on which FRR runs. Where the kernel has MACsec the
protected interface is a macsec device on the wire; elsewhere it is a TAP served
by a userspace forwarder (:mod:`testbed.macsec.forwarder`), one process per router
for all its link ends. Either way the protected interface follows the wire's
carrier, so a cut (the wire set down on both ends) looks to BFD and OSPF as it
does without encryption.

Keys (SAKs) and SCIs are drawn per run and per link; they are lab keys and go
into the results (``keys``, in the format :mod:`testbed.macsec.decrypt` reads),
so a capture of a wire can be decrypted afterwards.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal, Protocol

from pydantic import Field, field_validator

from testbed.errors import BringUpError, parse_section
from testbed.host.commands import Cmd
from testbed.host.files import write_json
from testbed.host.procs import Helper, cpu_seconds, python_env, wait_for
from testbed.macsec.cipher import CipherSuite
from testbed.macsec.config import OVERHEAD, LinkConfig, SideConfig
from testbed.macsec.errors import BackendError
from testbed.macsec.forwarder import control_path, key_channel
from testbed.macsec.kernel import macsec_stats_argv, parse_ip_macsec_stats, secy_commands
from testbed.macsec.link import ctl_request
from topologies.backbone import Link
from topologies.params import Section

BACKENDS = ("auto", "kernel", "userspace")


class Settings(Section):
    """The ``macsec:`` setting of a backbone (a mapping; true: these defaults)."""

    enabled: bool = Field(True, description="protect every link with MACsec")
    cipher: Literal[tuple(c.value for c in CipherSuite)] = Field(  # type: ignore
        "gcm-aes-128", description="the cipher suite")
    backend: Literal[BACKENDS] = Field(  # type: ignore[valid-type]
        "auto", description="kernel macsec devices, the userspace forwarders, or auto (the "
                            "kernel's where it has MACsec)")
    replay_window: int = Field(32, ge=0, le=1 << 30, description="packet numbers a frame "
                                                                 "may arrive late")
    mtu: int = Field(1500, ge=576, le=9000, description="MTU of the protected interfaces")

    @field_validator("cipher", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


#: the settings when nothing is said (and MACsec off)
DEFAULTS: dict[str, Any] = {**Settings().model_dump(), "enabled": False}

#: Counters reported per link end (the Linux names; ``ip -j -s macsec show``).
COUNTERS = ("OutPktsProtected", "OutPktsEncrypted", "InPktsOK", "InPktsNotValid",
            "InPktsInvalid", "InPktsLate", "InPktsNoTag", "InPktsBadTag", "InPktsUnknownSCI",
            "InPktsNoSCI", "InPktsUnusedSA", "InPktsNotUsingSA")


def validate(value: Any, where: str = "backbone.macsec") -> dict:
    """The ``macsec:`` setting of a backbone: a bool or a mapping; defaults filled.

    >>> validate(True)["cipher"], validate(None)["enabled"]
    ('gcm-aes-128', False)
    >>> validate({"cipher": "gcm-aes-256"})["enabled"]
    True
    >>> validate({"cipher": "des"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    testbed.errors.ConfigError: backbone.macsec.cipher: must be one of ...
    """
    if value is None or isinstance(value, bool):
        return {**DEFAULTS, "enabled": bool(value)}
    if isinstance(value, Settings):
        return value.model_dump()
    return parse_section(Settings, value, where).model_dump()


class Wiring(Protocol):
    """What the protected links read of their backbone's network
    (:class:`testbed.backbone.net.BackboneNet`)."""

    prefix: str
    folder: Path
    links: dict[str, tuple[int, Link]]

    def ns(self, node: str) -> str: ...
    def ifname(self, link: str, side: str) -> str: ...
    def wire(self, link: str, side: str) -> str: ...
    def link_addr(self, link: str, side: str) -> str: ...


def link_config(run_id: str, index: int, ends: list[tuple[str, str, str, str]], *,
                cipher: str, replay_window: int, mtu: int) -> LinkConfig:
    """A protected link with fresh SAKs; ``ends`` = [(netns, protected, wire, ip/len)] a, b.

    >>> cfg = link_config("1a2bl3", 3, [("tb1a2bnyc", "tb1a2bl3a", "tb1a2bw3a", "10.1.3.1/30"),
    ...                                  ("tb1a2bams", "tb1a2bl3b", "tb1a2bw3b", "10.1.3.2/30")],
    ...                   cipher="gcm-aes-128", replay_window=32, mtu=1500)
    >>> cfg.a.sci, cfg.b.mac, len(cfg.a.keys[0]), cfg.a.keys != cfg.b.keys
    ('0274620003010001', '02:74:62:00:03:02', 32, True)
    """
    suite = CipherSuite.parse(cipher)
    sides = []
    for i, (s, (netns, protected, wire, ip)) in enumerate(zip("ab", ends, strict=True)):
        mac = f"02:74:62:{index >> 8 & 0xFF:02x}:{index & 0xFF:02x}:{i + 1:02x}"
        sides.append(SideConfig(name=s, netns=netns, tap=protected, veth=wire, mac=mac, ip=ip,
                                sci=mac.replace(":", "") + "0001",
                                keys={0: os.urandom(suite.key_len).hex()}, ssci=i + 1))
    return LinkConfig(run_id, sides[0], sides[1], suite=suite.value,
                      salt=os.urandom(12).hex() if suite.xpn else "",
                      replay_window=replay_window, mtu=mtu)


def keys_record(configs: dict[str, LinkConfig]) -> dict:
    """The lab keys of every link, as :func:`testbed.macsec.decrypt.receivers` reads them."""
    return {"links": [{"name": name, "suite": cfg.suite, "salt": cfg.salt,
                       "sides": {s: {"sci": cfg.side(s).sci, "ssci": cfg.side(s).ssci,
                                     "netns": cfg.side(s).netns, "wire": cfg.side(s).veth,
                                     "keys": {str(an): k for an, k in cfg.side(s).keys.items()}}
                                 for s in "ab"}}
                      for name, cfg in configs.items()]}


class SecureLinks:
    """The protected interfaces of one backbone, built beside its network."""

    def __init__(self, net: Wiring, settings: dict, backend: str) -> None:
        self.net, self.settings, self.backend = net, settings, backend
        run_id = net.prefix[2:]
        self.configs: dict[str, LinkConfig] = {}
        for name, (i, lk) in net.links.items():
            ends = [(net.ns(node), net.ifname(name, s), net.wire(name, s),
                     f"{net.link_addr(name, s)}/30") for s, node in (("a", lk.a), ("b", lk.b))]
            self.configs[name] = link_config(f"{run_id}l{i}", i, ends,
                                             cipher=settings["cipher"],
                                             replay_window=settings["replay_window"],
                                             mtu=settings["mtu"])
        self.workdir = net.folder / "macsec"
        self.forwarders: dict[str, Helper] = {}

    def set_delays(self) -> None:
        """Every link's forwarders hold frames for its propagation delay (no netem)."""
        for name, cfg in self.configs.items():
            self.configs[name] = dataclasses.replace(cfg,
                                                     delay_ms=self.net.links[name][1].delay_ms)

    @property
    def wire_mtu(self) -> int:
        """MTU of the wire: the protected MTU plus SecTAG (with SCI) and ICV."""
        return self.settings["mtu"] + OVERHEAD

    def link_dir(self, name: str) -> Path:
        return self.workdir / name

    def commands(self) -> list[Cmd]:
        """The commands that make every protected interface (those carrying keys are
        marked secret: they reach ``ip`` on standard input, never on a command line)."""
        cmds = []
        for cfg in self.configs.values():
            for s in "ab":
                me = cfg.side(s)
                if self.backend == "kernel":
                    cmds += [Cmd(me.netns, tuple(argv[1:]), "key" in argv)
                             for argv in secy_commands(cfg, s)]
                    continue
                cmds += [Cmd(me.netns, ("link", "set", me.veth, "mtu", str(self.wire_mtu), "up")),
                         Cmd(me.netns, ("tuntap", "add", "dev", me.tap, "mode", "tap")),
                         Cmd(me.netns, ("link", "set", me.tap, "address", me.mac,
                                        "mtu", str(cfg.mtu), "up")),
                         Cmd(me.netns, ("addr", "add", me.ip, "dev", me.tap))]
        return cmds

    def start(self, stack: ExitStack, timeout: float = 30.0) -> None:
        """Start one forwarder per router (userspace only); wait until each answers."""
        if self.backend != "userspace":
            return
        per_node: dict[str, list[str]] = {}
        node_links: dict[str, list[LinkConfig]] = {}
        for name, cfg in self.configs.items():
            d = self.link_dir(name)
            d.mkdir(parents=True, exist_ok=True)
            write_json(d / "link.json", cfg.public_dict())  # no SAK: they go by key_channel
            _, lk = self.net.links[name]
            for s, node in (("a", lk.a), ("b", lk.b)):
                per_node.setdefault(node, []).extend(["--link", str(d / "link.json"), s, str(d)])
                node_links.setdefault(node, []).append(cfg)
        env = python_env()
        for node, args in per_node.items():
            keys = key_channel(node_links[node])  # the SAKs of this router's links alone
            try:
                helper = Helper(f"macsec-{node}", ["ip", "netns", "exec", self.net.ns(node),
                                                   sys.executable, "-m",
                                                   "testbed.macsec.forwarder", *args,
                                                   "--keys-fd", str(keys)],
                                pid_dir=self.net.folder / "pids", env=env,
                                log=self.workdir / f"forwarder-{node}.log", pass_fds=(keys,))
            finally:
                os.close(keys)
            stack.callback(helper.stop, 3.0)
            self.forwarders[node] = helper
        if not wait_for(self._all_answer, timeout, 0.2):
            dead = [n for n, h in self.forwarders.items() if not h.alive()]
            raise BringUpError(f"MACsec forwarders not ready in {timeout:g} s"
                               + (f" (exited: {', '.join(dead)}; see "
                                  f"{self.workdir}/forwarder-NODE.log)" if dead else ""))

    def _all_answer(self) -> bool:
        for helper in self.forwarders.values():
            if not helper.alive():
                raise BringUpError(f"MACsec forwarder {helper.name} exited")
        try:
            for name in self.configs:
                for s in "ab":
                    ctl_request(control_path(self.link_dir(name), s), {"op": "ping"}, 0.5)
        except BackendError:
            return False
        return True

    def counters(self) -> dict[str, dict[str, dict[str, int]]]:
        """``{link: {"a": {...}, "b": {...}}}``: the SecY counters of every link end."""
        out: dict[str, dict[str, dict[str, int]]] = {}
        for name, cfg in self.configs.items():
            out[name] = {}
            for s in "ab":
                me = cfg.side(s)
                if self.backend == "kernel":
                    from testbed.macsec.netns import run

                    full = parse_ip_macsec_stats(
                        run(macsec_stats_argv(me.tap), netns=me.netns).stdout)
                else:
                    try:
                        stats = ctl_request(control_path(self.link_dir(name), s),
                                             {"op": "stats"})["stats"]
                    except BackendError:
                        out[name][s] = {}
                        continue
                    full = {**stats["counters"],  # type: ignore[index]
                            "carrier_changes": stats.get("carrier_changes", 0)}  # type: ignore
                out[name][s] = {k: int(full.get(k, 0)) for k in (*COUNTERS, "carrier_changes")
                                if k in full}
        return out

    def cpu_seconds(self) -> dict[str, float]:
        """CPU seconds each router's forwarder used so far (userspace only)."""
        return {node: round(cpu_seconds(h.pid), 2) for node, h in self.forwarders.items()}

    def keys(self) -> dict:
        return keys_record(self.configs)


def totals(counters: dict[str, dict[str, dict[str, int]]]) -> dict[str, int]:
    """Counters summed over every link end.

    >>> totals({"x": {"a": {"InPktsOK": 2}, "b": {"InPktsOK": 3, "InPktsLate": 1}}})
    {'InPktsOK': 5, 'InPktsLate': 1}
    """
    out: dict[str, int] = {}
    for ends in counters.values():
        for c in ends.values():
            for k, v in c.items():
                out[k] = out.get(k, 0) + v
    return out
