"""A running lab as the live checks of ``testbed check LAB --lab NAME`` see it.

:class:`LiveLab` wraps a lab's record (``testbed up`` wrote it, :mod:`testbed.lab.state`)
and answers the questions a check asks of the running lab, each bounded by a timeout so
that a check never hangs: probes between hosts from inside their namespaces, a switch's
flows and groups, a router's routes and routing sessions, the MACsec counters of the
backbone's links, and faults applied through the lab's supervisor (as ``testbed fault``
does). It only reads the lab, except :meth:`fault`, whose callers undo what they apply.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from functools import cached_property
from pathlib import Path

from testbed.errors import ConfigError, HostError
from testbed.host.procs import wait_for
from testbed.lab import state
from testbed.lab.client import lab_class, request

#: seconds a command in a namespace may take before the check reports it as no answer
EXEC_TIMEOUT_S = 20.0
#: seconds the supervisor may take to apply a fault (or run acceptance: its own bound)
FAULT_TIMEOUT_S = 60.0
#: hosts that probe at once (each pings all its targets at once): a 16-host lab's 192
#: pairs in four rounds of four instead of sixteen rounds, about 48 pings at a time
PROBE_SOURCES = 4
_PORTS = re.compile(r"(?:members:|output:)([\d,]+)")


class LiveLab:
    """A running lab (its record), with bounded probes of it."""

    def __init__(self, record: dict) -> None:
        self.record = record
        self.name: str = record["name"]
        self.kind: str = record["kind"]
        self.prefix: str = record.get("prefix", "")
        #: what one check observed that a later check of the same grading may reuse
        #: (lab 7's settled sessions), keyed by the check's own name
        self.memo: dict[str, object] = {}

    @classmethod
    def find(cls, name: str) -> LiveLab:
        """The live lab called ``name``; :class:`ConfigError` (one line) when there is
        none or its supervisor is gone."""
        return cls(state.find(name))

    # -- what the lab is ---------------------------------------------------------------
    @property
    def scenario(self) -> str:
        return self.record["scenario"]

    @property
    def variant_name(self) -> str:
        return self.record["variant"]

    @cached_property
    def loaded(self):
        """The lab's scenario, as ``testbed up`` loaded it (no code it names is run)."""
        from testbed.core import scenario

        return scenario.load(self.record["scenario_file"])

    @cached_property
    def variant(self):
        return self.loaded.variant(self.variant_name)

    @cached_property
    def spec(self):
        """A fabric lab's topology spec (its spec.json)."""
        from topologies.spec import FabricSpec

        if self.kind != "fabric":
            raise ConfigError("--lab", f"lab {self.name} is a {self.kind} lab, not a fabric")
        return FabricSpec.from_json(Path(self.record["spec"]))

    def short(self, name: str) -> str:
        return name[len(self.prefix):] if name.startswith(self.prefix) else name

    # -- commands in its namespaces ----------------------------------------------------
    def run(self, node: str, argv: list[str],
            timeout: float = EXEC_TIMEOUT_S) -> subprocess.CompletedProcess:
        """``argv`` in the namespace of host or router ``node`` (short name), bounded."""
        return state.host(self.record, node).run(argv, timeout=timeout)

    def run_here(self, argv: list[str], timeout: float = EXEC_TIMEOUT_S) -> str:
        """``argv`` in the host's own namespace (ovs-ofctl), bounded; its output."""
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise HostError(f"{' '.join(argv[:3])}: no answer in {timeout:g} s") from None
        if done.returncode:
            raise HostError(f"{' '.join(argv[:4])}: {(done.stderr or done.stdout).strip()[-200:]}")
        return done.stdout

    def probe(self, src: str, ips: Iterable[str], count: int = 3,
              source: str | None = None) -> dict[str, bool]:
        """Ping every address of ``ips`` from ``src`` at once (``count`` echo requests, 0.2 s
        apart, each answered within 1 s); address -> whether any request was answered."""
        ips = list(ips)
        if not ips:
            return {}
        src_opt = f"-I {source} " if source else ""
        script = " ".join(
            f"(ping -n -q -c {count} -i 0.2 -W 1 {src_opt}{ip} >/dev/null 2>&1 "
            f"&& echo ok {ip} || echo no {ip}) &" for ip in ips) + " wait"
        done = self.run(src, ["sh", "-c", script], timeout=count * 0.2 + 15)
        said = dict(line.split()[::-1] for line in done.stdout.splitlines()
                    if line.startswith(("ok ", "no ")))
        return {ip: said.get(ip) == "ok" for ip in ips}

    def probes(self, asks: list[tuple[str, list[str], str | None]]) -> list[dict[str, bool]]:
        """:meth:`probe` for each (source node, addresses, source address or None) of
        ``asks``, :data:`PROBE_SOURCES` nodes at a time; their answers in that order."""
        with ThreadPoolExecutor(max_workers=PROBE_SOURCES) as pool:
            return list(pool.map(lambda ask: self.probe(ask[0], ask[1], source=ask[2]), asks))

    # -- a fabric's hosts and switches -------------------------------------------------
    def host_pairs_across_leaves(self) -> list[tuple[str, str, str]]:
        """(source host, destination address, what it is) of every pair of host NICs on
        the same plane behind different leaves."""
        spec = self.spec
        nics = [(self.short(h.name), i) for h in spec.hosts for i in h.interfaces]
        return [(a, j.ip, f"{a}>{b}") for a, i in nics for b, j in nics
                if a != b and i.plane == j.plane and i.switch != j.switch]

    def unreachable_across_leaves(self, hosts: set[str] | None = None) -> tuple[list[str], int]:
        """The pairs across leaves (of ``hosts``, default all) whose probes got no answer,
        and how many pairs were probed."""
        pairs = [p for p in self.host_pairs_across_leaves()
                 if hosts is None or (p[0] in hosts and p[2].split(">")[1] in hosts)]
        by_src: dict[str, list[tuple[str, str]]] = {}
        for src, ip, what in pairs:
            by_src.setdefault(src, []).append((ip, what))
        answers = self.probes([(src, [ip for ip, _ in targets], None)
                               for src, targets in by_src.items()])
        bad = [what for (_src, targets), answered in zip(by_src.items(), answers, strict=True)
               for ip, what in targets if not answered[ip]]
        return bad, len(pairs)

    def ofctl(self, switch: str, what: str = "dump-flows") -> str:
        """``ovs-ofctl -O OpenFlow13 WHAT`` of a switch (short name): its flows or groups."""
        targets = self.record.get("ofctl") or {}
        target = targets.get(switch, self.prefix + switch)
        return self.run_here(["ovs-ofctl", "-O", "OpenFlow13", what, target])

    def flows(self, switch: str) -> list[str]:
        return [ln.strip() for ln in self.ofctl(switch).splitlines() if "actions=" in ln]

    def groups(self, switch: str) -> list[str]:
        return [ln.strip() for ln in self.ofctl(switch, "dump-groups").splitlines()
                if "group_id=" in ln]

    @staticmethod
    def ports_named(lines: Iterable[str]) -> set[int]:
        """The ports the actions of ``lines`` send to (``output:N``, ``members:N,M``).

        >>> sorted(LiveLab.ports_named(["actions=bundle(...,members:3,4)", "output:2"]))
        [2, 3, 4]
        """
        return {int(p) for ln in lines for m in _PORTS.findall(ln) for p in m.split(",") if p}

    # -- a backbone's routers ----------------------------------------------------------
    def routers(self) -> list[str]:
        return list(self.record.get("hosts", {}))

    def routes(self, router: str) -> list[dict]:
        """The router's kernel routes (``ip -j route``)."""
        done = self.run(router, ["ip", "-j", "route", "show"])
        return json.loads(done.stdout or "[]") if done.returncode == 0 else []

    def vtysh_json(self, router: str, command: str):
        """A ``vtysh -c COMMAND`` (a json one) of the router; None when it gives nothing."""
        argv = lab_class(self.record).cli_argv(self.record, router, command)
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=EXEC_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise HostError(f"{router}: vtysh {command!r}: no answer in "
                            f"{EXEC_TIMEOUT_S:g} s") from None
        try:
            return json.loads(done.stdout) if done.stdout.strip() else None
        except json.JSONDecodeError:
            return None

    def address(self, node: str, what: str) -> str | None:
        """A router's address named ``what`` (``lo``, ``site0``), without its length."""
        for entry in self.record["hosts"][node]["addresses"]:
            name, _, cidr = entry.partition(" ")
            if name == what:
                return cidr.split("/")[0]
        return None

    def link_index(self, link: str) -> int:
        """The index of a backbone link in its interfaces' names (``PREFIXl3a``: 3)."""
        wire = self.record["links"][link]["wire_a"]
        return int(re.fullmatch(r"[wl](\d+)a", wire[len(self.prefix):]).group(1))

    def link_ifname(self, link: str, side: str) -> str:
        """The interface the routers run on for ``link``'s end (the protected one with
        MACsec, the veth without)."""
        return f"{self.prefix}l{self.link_index(link)}{side}"

    def macsec_counters(self) -> dict[str, dict[str, dict[str, int]]] | None:
        """``{link: {"a": {...}, "b": {...}}}``, the SecY counters of every link end
        (kernel MACsec: ``ip -j -s macsec show``; userspace: each forwarder's own), or None
        when the lab runs without MACsec."""
        if not self.record.get("keys"):
            return None
        from testbed.host.naming import run_dir
        from testbed.macsec.errors import BackendError
        from testbed.macsec.forwarder import control_path
        from testbed.macsec.kernel import macsec_stats_argv, parse_ip_macsec_stats
        from testbed.macsec.link import ctl_request

        folder = run_dir(self.record["run_id"]) / "backbone" / self.variant_name / "macsec"
        out: dict[str, dict[str, dict[str, int]]] = {}
        for link, ends in self.record["links"].items():
            out[link] = {}
            for side in "ab":
                ctl = control_path(folder / link, side)
                if ctl.exists():  # userspace forwarders
                    try:
                        stats = ctl_request(ctl, {"op": "stats"}, timeout=5.0)["stats"]
                        out[link][side] = {k: int(v) for k, v in stats["counters"].items()}
                    except BackendError:
                        out[link][side] = {}
                    continue
                done = self.run(ends[side], macsec_stats_argv(self.link_ifname(link, side)))
                out[link][side] = parse_ip_macsec_stats(done.stdout) if done.returncode == 0 \
                    else {}
        return out

    # -- changing it -------------------------------------------------------------------
    def fault(self, kind: str, target: str | None = None) -> str:
        """Apply a fault now through the lab's supervisor (as ``testbed fault``)."""
        reply = request(self.record, {"op": "fault", "kind": kind, "target": target},
                         timeout=FAULT_TIMEOUT_S)
        if not reply.get("ok"):
            raise HostError(f"lab {self.name}: {kind} {target or ''}: {reply.get('error')}")
        return reply["result"]

    def accept(self, checks: list[str] | None, timeout: float) -> dict:
        """The acceptance checks on the running rack (as ``testbed accept``, nothing
        excluded); the result ``testbed accept`` prints."""
        reply = request(self.record, {"op": "accept", "checks": checks, "exclude": False},
                         timeout=timeout)
        if not reply.get("ok"):
            raise HostError(f"lab {self.name}: acceptance: {reply.get('error')}")
        return reply["result"]


def wait_until(condition: Callable[[], bool], timeout: float, step: float = 0.5) -> float | None:
    """Seconds until ``condition()`` held (asked every ``step`` s), None if it did not
    within ``timeout``."""
    t0 = time.monotonic()
    return time.monotonic() - t0 if wait_for(condition, timeout, step) else None
