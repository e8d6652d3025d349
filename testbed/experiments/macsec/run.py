"""The macsec kind: the same shaped link unprotected and protected, under attack.

:func:`validate` checks a scenario's ``macsec:`` section (:class:`MacsecSection`, pure).
The kind runs two variants one after the other on the same namespaces and addresses
(the 802.1AE SecY, links and forwarders are the library :mod:`testbed.macsec`):

* ``unprotected``: namespaces ``Pa`` and ``Pb`` joined by a plain veth;
* ``protected``: the same namespaces joined by a MACsec link whose wire runs
  through a hub (:class:`~testbed.macsec.wire.TappedWire`) where an attacker
  namespace injects tampered, replayed and untagged frames toward b, and where
  tcpdump captures the wire to ``wire.pcap`` in the variant's folder, beside the
  ``macsec-keys.json`` that decrypts it (fresh SAKs for every seed's protected run).

Both shape each veth's egress to ``link_mbps`` and carry agent chains (services
in b, driver in a) for ``duration_s`` plus one bulk TCP flow a -> b (iperf3) for
``bulk_seconds``. Every namespace, process and capture is removed at the end,
also on error, Ctrl-C and SIGTERM.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from pathlib import Path
from typing import Any

from testbed.core import layout
from testbed.core.fidelity import WatchedLink
from testbed.core.results import ZERO_TRAINING, agents_entry
from testbed.errors import BringUpError
from testbed.experiments import base
from testbed.experiments.macsec.schema import MacsecSection, check_timing, validate
from testbed.host.files import read_jsonl, write_json, write_text
from testbed.host.hosts import NetnsHost
from testbed.host.naming import claim, new_run_id, run_dir, run_prefix
from testbed.host.procs import Helper, python_env, wait_for
from testbed.macsec.config import LinkConfig
from testbed.macsec.decrypt import key_reference
from testbed.macsec.kernel import KernelMacsecLink, create_link
from testbed.macsec.link import UserspaceLink
from testbed.macsec.secy import RX_DELIVERED
from testbed.macsec.wire import TappedWire, plain_pair, remove_pair, shape
from testbed.macsec.wireshark import UAT_FILE, write_uat
from testbed.workloads import chains, iperf3
from testbed.workloads.chains import SERVICES, Service

Progress = Callable[[str], None]
Link = UserspaceLink | KernelMacsecLink
Watch = Callable[[list[WatchedLink]], AbstractContextManager]

IPERF_PORT = 5201
BULK_DELAY_S = 1.0
SETTLE_S = 0.5
#: how long a run waits for its attacker to begin capturing (before the traffic starts),
#: and, after the traffic, for an attacker still injecting
ATTACKER_MAX_S = 30.0
SETTLE_MAX_S = 5.0
KEYS_FILE = layout.MACSEC_KEYS
WIRE_PCAP = layout.WIRE_PCAP
#: receive counters an attack can raise (the rest only count good frames)
ATTACK_COUNTERS = ("InPktsNotValid", "InPktsInvalid", "InPktsLate", "InPktsNoTag",
                   "InPktsUntagged", "InPktsBadTag", "InPktsNoSCI", "InPktsUnknownSCI",
                   "InPktsNotUsingSA", "InPktsUnusedSA", "InPktsDelayed", "InPktsUnchecked")









# processes -------------------------------------------------------------------
def _python(module: str, *args: str) -> list[str]:
    return [*chains.TRAFFIC[:1], "-m", module, *args]


class Traffic:
    """Agent chains b <- a and one bulk TCP flow a -> b, recorded under ``out``."""

    def __init__(self, cfg: LinkConfig, section: dict, *, out: Path, pid_dir: Path,
                 duration_s: float, seed: int, stack: ExitStack) -> None:
        self.cfg, self.section, self.out, self.pid_dir = cfg, section, out, pid_dir
        self.duration_s, self.seed, self.stack = duration_s, seed, stack
        self.driver: Helper | None = None
        self.bulk: Helper | None = None
        self.t0 = 0.0

    @property
    def chains_file(self) -> Path:
        return self.out / layout.CHAINS

    def helper(self, name: str, ns: str, argv: list[str], **kw: Any) -> Helper:
        """A long-running process in namespace ``ns``, stopped with the variant."""
        proc = NetnsHost(ns).spawn(name, argv, pid_dir=self.pid_dir,
                                   log=self.out / f"{name}.log", env=python_env(), **kw)
        self.stack.callback(proc.stop)
        return proc

    def start_servers(self) -> None:
        """Agent services and the iperf3 server in b; returns when they listen."""
        b = self.cfg.b
        where = Service(NetnsHost(b.netns), [b.address])
        chains.start_services(dict.fromkeys(SERVICES, where), out=self.out,
                              pid_dir=self.pid_dir, stack=self.stack)
        self.helper("iperf-server", b.netns, iperf3.server(b.address, IPERF_PORT, once=False))

    def start_clients(self) -> None:
        """The chain driver now and the bulk client after :data:`BULK_DELAY_S`."""
        s = self.section
        self.t0 = time.monotonic()
        self.driver = chains.start_driver(
            NetnsHost(self.cfg.a.netns), out=self.out, pid_dir=self.pid_dir,
            duration_s=self.duration_s, seed=self.seed, concurrency=s["chain_concurrency"],
            timeout_ms=s["chain_timeout_ms"], stack=self.stack)

    def tick(self) -> None:
        """Start the bulk flow when its time has come."""
        if self.bulk is None and self.elapsed() >= BULK_DELAY_S:
            self.bulk = self.helper("bulk", self.cfg.a.netns, iperf3.client(
                self.cfg.b.address, IPERF_PORT, seconds=self.section["bulk_seconds"]),
                stdout_file=self.out / layout.BULK)

    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def running(self) -> bool:
        procs = [p for p in (self.driver, self.bulk) if p is not None]
        return self.bulk is None or any(p.alive() for p in procs)

    def wait(self, on_tick: Callable[[float], None], progress: Progress, tag: str) -> None:
        """Run until driver and bulk flow end (bounded); ``on_tick`` gets elapsed seconds."""
        limit = max(self.duration_s, BULK_DELAY_S + self.section["bulk_seconds"]) + 20
        last = 0.0
        while self.running() and self.elapsed() < limit:
            self.tick()
            on_tick(self.elapsed())
            if self.elapsed() - last >= 5:
                last = self.elapsed()
                progress(f"{tag}: {last:4.0f} s  chains finished: "
                         f"{sum(1 for _ in read_jsonl(self.chains_file))}")
            time.sleep(0.05)
        for proc in (self.driver, self.bulk):
            if proc is not None and proc.alive():
                proc.stop()

    def bulk_entry(self) -> dict:
        """``bulk``: goodput (receiver side) and retransmits of the iperf3 flow."""
        try:
            end = (iperf3.read(self.out / layout.BULK) or {})["end"]
            return {"goodput_mbps": round(end["sum_received"]["bits_per_second"] / 1e6, 3),
                    "retransmits": end["sum_sent"].get("retransmits", 0),
                    "seconds": round(end["sum_received"]["seconds"], 3)}
        except (OSError, ValueError, KeyError) as exc:
            return {"goodput_mbps": 0.0, "retransmits": None, "error": f"{exc!r}"}


# the two variants -------------------------------------------------------------
class Lab:
    """State shared by both variants: the link's addresses, keys and rotations."""

    def __init__(self, section: dict, *, out: Path, duration_s: float, seed: int,
                 run_id: str, progress: Progress) -> None:
        self.s = section
        self.out, self.duration_s, self.seed = out, duration_s, seed
        self.run_id, self.progress = run_id, progress
        self.prefix = run_prefix(run_id)
        self.cfg = LinkConfig.generate(
            run_id, suite=section["suite"], encrypt=section["encrypt"],
            validate=section["validate"], replay_window=section["replay_window"],
            mtu=section["mtu"])
        self.pid_dir = run_dir(run_id)
        self.keys: dict[str, dict[int, str]] = {s: dict(self.cfg.side(s).keys) for s in "ab"}
        self.rotations: list[dict] = []
        #: every protected run's keys and capture (a seed each), in run order
        self.protected_runs: list[dict] = []

    def _shape(self, ifname_a: str, ifname_b: str, mtu: int) -> None:
        shape(ifname_a, self.cfg.a.netns, self.s["link_mbps"], mtu)
        shape(ifname_b, self.cfg.b.netns, self.s["link_mbps"], mtu)

    def watched(self) -> list[WatchedLink]:
        """The two shaped veths, for the fidelity monitor."""
        return [WatchedLink(side.netns, side.veth, self.s["link_mbps"])
                for side in (self.cfg.a, self.cfg.b)]

    def _traffic(self, out: Path, stack: ExitStack) -> Traffic:
        out.mkdir(parents=True, exist_ok=True)
        return Traffic(self.cfg, self.s, out=out, pid_dir=self.pid_dir,
                       duration_s=self.duration_s, seed=self.seed, stack=stack)

    def _entry(self, name: str, traffic: Traffic, counts: dict, start_s: float,
               stop_s: float) -> dict:
        return {"name": name, "run_id": self.run_id,
                "fabric": {**counts, "start_s": round(start_s, 3), "stop_s": round(stop_s, 3)},
                "agents": agents_entry(traffic.chains_file),
                "training": dict(ZERO_TRAINING), "bulk": traffic.bulk_entry()}

    def unprotected(self, out: Path, tag: str, watch: Watch | None = None) -> dict:
        """Plain veth between the same namespaces, shaped alike; ``watch``: the fidelity
        monitor's measured window (``RunContext.watch``)."""
        cfg = self.cfg
        t0 = time.monotonic()
        with ExitStack() as stack:
            stack.callback(remove_pair, cfg)
            plain_pair(cfg)
            self._shape(cfg.a.veth, cfg.b.veth, cfg.mtu)
            traffic = self._traffic(out, stack)
            traffic.start_servers()
            start_s = time.monotonic() - t0
            self.progress(f"{tag}: plain veth up in {start_s:.2f} s; traffic for "
                          f"{self.duration_s:g} s, bulk {self.s['bulk_seconds']:g} s")
            stack.enter_context((watch or _no_watch)(self.watched()))
            traffic.start_clients()
            traffic.wait(lambda _t: None, self.progress, tag)
            t1 = time.monotonic()
        entry = self._entry("unprotected", traffic,
                            {"switches": 0, "hosts": 2, "links": 1},
                            start_s, time.monotonic() - t1)
        return entry

    def protected(self, out: Path, tag: str,
                  watch: Watch | None = None) -> tuple[dict, dict]:
        """The MACsec link through the tapped hub, attacked and captured into the run's
        folder ``out`` (``wire.pcap``, with the keys that decrypt it in ``macsec-keys.json``).
        Every protected run (one per seed) draws its own SAKs: packet numbers start again
        at 1 on a new link, so the same SAKs would repeat (SAK, SCI, PN) nonces."""
        if self.protected_runs:
            self.cfg = self.cfg.rekeyed()
        self.keys = {side: dict(self.cfg.side(side).keys) for side in "ab"}
        self.protected_runs.append({"seed": self.seed, "folder": out, "rotations": []})
        cfg, s = self.cfg, self.s
        wire = TappedWire(self.prefix)
        t0 = time.monotonic()
        with ExitStack() as stack:
            stack.callback(wire.remove)
            wire.create(cfg.mtu + 32)
            link = create_link(cfg, out / "link",
                               backend=s["backend"], wire=wire.build)
            stack.callback(link.stop)
            link.start()
            self._shape(cfg.a.veth, cfg.b.veth, cfg.mtu + 32)
            traffic = self._traffic(out, stack)
            vout = traffic.out
            capture = traffic.helper("tcpdump", wire.netns, [
                "tcpdump", "-i", wire.port("b"), "-s", "0", "--immediate-mode", "-U", "-B",
                "8192", "-Z", "root", "-w", str(vout / WIRE_PCAP)])
            if not wait_for(lambda: "listening on" in _read(vout / layout.TCPDUMP_LOG), 10):
                raise BringUpError(f"tcpdump did not start (see {vout / layout.TCPDUMP_LOG})")
            attack = s["attack"]
            at_s = attack["at_s"] if attack["at_s"] is not None else self.duration_s / 2
            # the attacker captures from the traffic's first frame: it starts before the
            # traffic and learns when to inject once the traffic has started
            ready, inject_at = self.pid_dir / "attacker.ready", self.pid_dir / "attacker.at"
            for stale in (ready, inject_at):  # an earlier seed's
                stale.unlink(missing_ok=True)
            attacker = traffic.helper("attacker", wire.attacker_netns, _python(
                "testbed.macsec.attacker", "--iface", wire.attacker_veth,
                "--victim-mac", cfg.b.mac, "--peer-mac", cfg.a.mac,
                "--src-ip", cfg.a.address, "--dst-ip", cfg.b.address,
                "--tampered", str(attack["tampered"]), "--replayed", str(attack["replayed"]),
                "--untagged", str(attack["untagged"]), "--window", str(cfg.replay_window),
                "--ready", str(ready),
                "--inject-at-file", str(inject_at), "--out", str(vout / layout.ATTACK)))
            traffic.start_servers()
            if not (wait_for(lambda: ready.exists() or not attacker.alive(), ATTACKER_MAX_S)
                    and ready.exists()):
                raise BringUpError(f"the attacker did not begin its capture (it exited, or "
                                   f"{ATTACKER_MAX_S:g} s passed; see {vout / 'attacker.log'})")
            start_s = time.monotonic() - t0
            self.progress(f"{tag}: {link.backend} MACsec link ({cfg.suite}, encrypt "
                          f"{cfg.encrypt}, validate {cfg.validate}) up in {start_s:.2f} s")
            stack.enter_context((watch or _no_watch)(self.watched()))
            traffic.start_clients()
            write_text(inject_at, f"{time.time() + at_s:.3f}\n")
            self.progress(f"{tag}: attacker injects at {at_s:g} s: {attack['tampered']} "
                          f"tampered, {attack['replayed']} replayed, {attack['untagged']} "
                          "untagged")
            traffic.wait(lambda t: self._maybe_rotate(link, t), self.progress, tag)
            # the attack belongs to the run: the counters are read once the attacker has
            # sent and written what it sent (bounded: a loaded host delays it)
            if not wait_for(lambda: not attacker.alive(), ATTACKER_MAX_S):
                self.progress(f"{tag}: the attacker still runs {ATTACKER_MAX_S:g} s after "
                              "the traffic: the counters are read without its record")
            macsec_links = self._settled_stats(link)
            capture.stop()
            t1 = time.monotonic()
        entry = self._entry("protected", traffic, {"switches": 1, "hosts": 3, "links": 3},
                            start_s, time.monotonic() - t1)
        return entry, {"backend": link.backend, "link": macsec_links,
                       "attack_sent": _attack_sent(vout / layout.ATTACK)}

    def _maybe_rotate(self, link: Link, elapsed: float) -> None:
        at = self.s["rotate_at_s"]
        this = self.protected_runs[-1]["rotations"]
        if at is None or this or elapsed < at:
            return
        keys = {s: os.urandom(self.cfg.cipher_suite.key_len).hex() for s in "ab"}
        an = link.rotate(keys)
        for side in "ab":
            self.keys[side][an] = keys[side]
        this.append({"at_s": round(elapsed, 3), "an": an})
        self.rotations.append({"seed": self.seed, "at_s": round(elapsed, 3), "an": an})
        self.progress(f"protected: rotated keys at {elapsed:.1f} s to AN {an}")

    def _settled_stats(self, link: Link) -> dict:
        """The link's counters once the queues have drained: read every SETTLE_S until
        two readings agree (a forwarder a loaded host delays is still handing frames
        over), at most SETTLE_MAX_S."""
        deadline = time.monotonic() + SETTLE_MAX_S
        time.sleep(SETTLE_S)
        stats = self._link_stats(link)
        while time.monotonic() < deadline:
            time.sleep(SETTLE_S)
            again = self._link_stats(link)
            if again == stats:
                break
            stats = again
        return stats

    def _link_stats(self, link: Link) -> dict:
        sides = {s: link.counters(s) for s in "ab"}
        tap = {s: link.tap_stats(s) for s in "ab"}
        result: dict[str, Any] = {"name": self.prefix, "sides": sides, "tap": tap}
        if isinstance(link, UserspaceLink):
            result["io"] = {s: link.stats(s)["io"] for s in "ab"}
        return result

    def link_keys(self) -> dict:
        """The keys of the protected run now running (or last run): one link entry."""
        cfg = self.cfg
        sides = {s: {"sci": cfg.side(s).sci, "ssci": cfg.side(s).ssci, "mac": cfg.side(s).mac,
                     "keys": {str(an): k for an, k in sorted(self.keys[s].items())}}
                 for s in "ab"}
        name = self.prefix if len(self.protected_runs) <= 1 else \
            f"{self.prefix}-seed{self.protected_runs[-1]['seed']}"
        return {"name": name, "suite": cfg.suite, "encrypt": cfg.encrypt, "salt": cfg.salt,
                "sides": sides}

    def finish_protected(self) -> None:
        """Keep the keys of the protected run that just ended, and write them beside its
        capture."""
        run = self.protected_runs[-1]
        run["keys"] = self.link_keys()
        write_json(run["folder"] / KEYS_FILE, {"links": [run["keys"]]}, secret=True)

    def keys_record(self) -> dict:
        """The lab keys of every protected run so far (a link entry each, every SAK it
        used), enough to decrypt each run's ``wire.pcap`` (hex)."""
        return {"links": [r["keys"] for r in self.protected_runs if "keys" in r]}


def _no_watch(links: list[WatchedLink]) -> AbstractContextManager:
    return nullcontext()


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except FileNotFoundError:
        return ""


def _attack_sent(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {"replayed_sent": 0, "tampered_sent": 0, "untagged_sent": 0,
                "error": f"attacker wrote no result ({path.name})"}


def attack_entry(sent: dict, link: dict, validate_mode: str) -> dict:
    """What the attacker sent, what b counted for it and what reached b's TAP."""
    sides = link["sides"]
    injected = sent["tampered_sent"] + sent["replayed_sent"] + sent["untagged_sent"]
    delivered_b = sum(v for k, v in sides["b"].items() if k in RX_DELIVERED)
    entry: dict[str, Any] = {
        "tampered_sent": sent["tampered_sent"], "replayed_sent": sent["replayed_sent"],
        "untagged_sent": sent["untagged_sent"],
        # replays the receiver's window still covered when sent (a slow host): accepted
        "replayed_in_window": sent.get("replayed_in_window", 0),
        "counters_b": {k: sides["b"][k] for k in ATTACK_COUNTERS if k in sides["b"]},
        "counters_a": {k: sides["a"][k] for k in ATTACK_COUNTERS
                       if sides["a"].get(k)},
    }
    if validate_mode == "strict":
        entry["expected_b"] = {"InPktsNotValid": sent["tampered_sent"],
                               "InPktsLate": sent["replayed_sent"]
                               - sent.get("replayed_in_window", 0),
                               "InPktsNoTag": sent["untagged_sent"]}
    if "io" in link:  # userspace: exact accounting from the forwarders
        legit = link["io"]["a"]["wire_tx"]
        entry["frames_at_b_not_from_a"] = link["io"]["b"]["wire_rx"] - legit
        entry["delivered_to_tap"] = delivered_b - legit
        entry["accounting_exact"] = entry["frames_at_b_not_from_a"] == injected
    else:  # kernel: frames lost in a's qdisc are invisible, so this is a lower bound
        legit = sides["a"]["OutPktsProtected"] + sides["a"]["OutPktsEncrypted"]
        entry["delivered_to_tap"] = max(0, link["tap"]["b"]["rx_packets"] - legit)
        entry["accounting_exact"] = False
    return entry


def _ratio(num: float | None, den: float | None) -> float | None:
    return round(num / den, 4) if num and den else None


class MacsecExperiment(base.Experiment):
    """The ``macsec:`` kind: ``unprotected`` then ``protected``, on the same namespaces and
    addresses. Also writes ``macsec-keys.json`` (lab keys) and ``wire.pcap``."""

    KIND = "macsec"
    SECTIONS = {"macsec": MacsecSection}
    VARIANTS = (base.VariantRef("unprotected"), base.VariantRef("protected"))

    def __init__(self, data: dict, **kw: Any) -> None:
        super().__init__(data, **kw)
        self.cfg = validate(data.get("macsec"))
        check_timing(self.cfg, self.duration_s)
        self.lab: Lab | None = None
        self.details: dict = {}

    @property
    def variants(self) -> tuple[base.VariantRef, ...]:
        return self.VARIANTS

    def start(self, ctx: base.RunContext) -> None:
        run_id = ctx.run_id or new_run_id()
        self.lab = lab = Lab(self.cfg, out=ctx.root, duration_s=ctx.duration_s,
                             seed=self.seed, run_id=run_id, progress=ctx.progress)
        made_pid_dir = not lab.pid_dir.exists()
        claim(run_id)
        if made_pid_dir:
            ctx.stack.callback(shutil.rmtree, lab.pid_dir, True)
        write_json(ctx.root / KEYS_FILE, lab.keys_record(), secret=True)

    def run_variant(self, variant: base.VariantRef, *, seed: int, out: Path, tag: str,
                    ctx: base.RunContext) -> dict:
        assert self.lab is not None
        self.lab.seed = seed
        if variant.name == "unprotected":
            return self.lab.unprotected(out, tag, ctx.watch)
        entry, self.details = self.lab.protected(out, tag, ctx.watch)
        self.lab.finish_protected()
        write_json(ctx.root / KEYS_FILE, self.lab.keys_record(), secret=True)
        return entry

    def finish(self, runs: list[dict], out: Path, ctx: base.RunContext) -> dict:
        assert self.lab is not None
        cfg, details = self.cfg, self.details
        by_name = {e["name"]: e for e in runs}
        plain, protected = by_name["unprotected"], by_name["protected"]
        link = details["link"]
        throughput = {"protected": protected["bulk"]["goodput_mbps"],
                      "unprotected": plain["bulk"]["goodput_mbps"]}
        throughput["ratio"] = _ratio(throughput["protected"], throughput["unprotected"])
        latency = {e["name"]: {q: e["agents"]["latency_ms"][q] for q in ("p50", "p99")}
                   for e in (protected, plain)}
        # wire.pcap in the results folder: the last protected run's (what the lab guide
        # opens), a relative link
        last = (self.lab.protected_runs[-1]["folder"] / WIRE_PCAP).relative_to(out)
        link_path = out / WIRE_PCAP
        if link_path.is_symlink() or not link_path.exists():
            tmp = out / f".{WIRE_PCAP}.tmp"
            tmp.unlink(missing_ok=True)
            tmp.symlink_to(last)
            tmp.replace(link_path)
        macsec = {
            "backend": details["backend"], "suite": cfg["suite"], "encrypt": cfg["encrypt"],
            "validate": cfg["validate"], "replay_window": cfg["replay_window"],
            "mtu": cfg["mtu"], "link_mbps": cfg["link_mbps"],
            "links": [link],
            "attack": attack_entry(details["attack_sent"], link, cfg["validate"]),
            "throughput_mbps": throughput,
            "chain_latency_ms": latency,
            "rotations": self.lab.rotations,
            # the last protected run's capture; every seed's in captures
            "wire_pcap": str(last),
            "captures": [{"seed": r["seed"],
                          "wire_pcap": str((r["folder"] / WIRE_PCAP).relative_to(out)),
                          "keys_file": str((r["folder"] / KEYS_FILE).relative_to(out))}
                         for r in self.lab.protected_runs],
            "keys_file": KEYS_FILE,
            # the same keys as Wireshark's MACsec "Pre-Shared Key List" file
            "wireshark_keys_file": write_uat(self.lab.keys_record(), out / UAT_FILE).name,
            # which keys, not the keys: results are shared; the key files are 0600
            "keys": key_reference(self.lab.keys_record(), KEYS_FILE),
        }
        ctx.progress(closing_note(macsec))
        return {"macsec": macsec}

    @staticmethod
    def report_section(summary: dict, out: Path) -> list[str]:
        """The report's MACsec section (Markdown lines)."""
        macsec = summary["macsec"]
        return ["## MACsec", "", closing_note(macsec), "",
                f"The protected wire is in `{macsec['wire_pcap']}` (each seed's in its "
                "protected folder, with fresh keys); the lab keys that decrypt them are in "
                f"`{macsec['keys_file']}`; `testbed decrypt "
                f"{macsec['wire_pcap']} --keys {macsec['keys_file']} -o plain.pcap` writes its "
                "plaintext"
                + (f", and `{macsec['wireshark_keys_file']}` is Wireshark's MACsec key list "
                   "(copy it into a Wireshark profile)" if macsec.get("wireshark_keys_file")
                   else "") + ".", "",
                "The key files are readable by their owner alone (mode 0600): whoever has "
                "them decrypts every capture of this run, so share the results folder "
                "without them (`summary.json` and `manifest.json` name them and hold only "
                "each key's fingerprint). They are lab keys, drawn for this run only.", ""]


def closing_note(macsec: dict) -> str:
    """One paragraph for the report: throughput protected vs unprotected, attack counters."""
    t, a = macsec["throughput_mbps"], macsec["attack"]
    lat = macsec["chain_latency_ms"]
    ratio = f"{t['ratio']:.1%}" if t["ratio"] is not None else "n/a"
    counters = ", ".join(f"{k} +{v}" for k, v in a["counters_b"].items() if v) or "none"
    return (f"MACsec ({macsec['backend']}, {macsec['suite']}): bulk TCP {t['protected']:.2f} "
            f"Mb/s protected vs {t['unprotected']:.2f} Mb/s unprotected ({ratio}); chain p50 "
            f"{_ms(lat['protected']['p50'])} vs {_ms(lat['unprotected']['p50'])}, p99 "
            f"{_ms(lat['protected']['p99'])} vs {_ms(lat['unprotected']['p99'])}. Attack: "
            f"{a['tampered_sent']} tampered, {a['replayed_sent']} replayed, "
            f"{a['untagged_sent']} untagged sent; counters at b: {counters}; delivered to "
            f"b's TAP: {a['delivered_to_tap']}.")


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"


EXPERIMENT = MacsecExperiment
