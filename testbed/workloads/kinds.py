"""Workload kinds: the entries of a variant's ``workloads:`` list other than the agent
chains and the training collective, a registry of one small class a kind.

A kind says which of its fields name hosts (``HOSTS``: resolved to node indices before
it sees an entry), what it checks against the fabric (:meth:`WorkloadKind.check`), what
it starts before traffic does (:meth:`~WorkloadKind.prepare`: servers), what it starts
at its ``at_s`` (:meth:`~WorkloadKind.start`) and what it adds to its record in
``summary.json`` (:meth:`~WorkloadKind.record`). The built-in kinds are ``command``,
``iperf3``, ``replay`` and ``elephants``; their fields are models in
:mod:`testbed.experiments.fabric.schema`. A scenario names a kind of its own by dotted
path, its fields under ``params:`` checked by its ``PARAMS`` model
(``examples/workloads/udp_burst.py``)::

    workloads:
      - {kind: "examples.workloads.udp_burst:UdpBurst", host: n0, at_s: 1,
         params: {to: 3, packets: 200}}

>>> sorted(KINDS)
['command', 'elephants', 'iperf3', 'replay']
>>> KINDS["iperf3"].HOSTS
('client', 'server')
"""

from __future__ import annotations

import json
import re
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel

from testbed.errors import ConfigError, parse_section
from testbed.faults.schedule import Fault, Schedule
from testbed.host.procs import Helper, python_env, wait_for
from testbed.workloads import iperf3
from testbed.workloads.chains import TRAFFIC
from topologies import plugins
from topologies.params import ParamError
from traffic.patterns import hedera

if TYPE_CHECKING:
    from testbed.fabric.net import Fabric
    from topologies.spec import FabricSpec

PLACEHOLDER = re.compile(r"\{n(\d+)(?:\.p(\d+))?\}")
#: elephants entry k, flow i listens on ELEPHANT_BASE_PORT + 1000 k + i
ELEPHANT_BASE_PORT = 20000
#: elephants end this long before the run does by default: iperf3's client learns what
#: its server received only in the exchange after the test, which a stop would cut off
ELEPHANT_MARGIN_S = 2.0


@dataclass
class Started:
    """One workload entry and the processes that run it."""

    index: int
    entry: dict
    procs: list[Helper] = field(default_factory=list)
    started: float | None = None
    error: str | None = None
    #: what its kind keeps between prepare, start and record (elephants: the flows)
    state: dict = field(default_factory=dict)


class WorkloadKind:
    """One kind of workload; subclasses set NAME and the methods they need."""

    NAME: ClassVar[str] = ""
    #: the entry's fields that name a host (``n3`` or 3), as node indices for the kind
    HOSTS: ClassVar[tuple[str, ...]] = ("host",)
    #: a kind of one's own: its fields under ``params:`` (None: it takes none)
    PARAMS: ClassVar[type[BaseModel] | None] = None

    def check(self, entry: dict, spec: FabricSpec, where: str) -> None:
        """ConfigError when ``entry`` (hosts resolved) does not fit the fabric."""

    def prepare(self, run: ExtraWorkloads, item: Started) -> None:
        """Before traffic starts (servers that must listen first)."""

    def start(self, run: ExtraWorkloads, item: Started) -> None:
        """At the entry's ``at_s``: its processes (:meth:`ExtraWorkloads.spawn`); the
        last one spawned is the one whose exit status the record keeps."""
        raise NotImplementedError

    def record(self, run: ExtraWorkloads, item: Started, rec: dict) -> None:
        """Add the kind's figures to the entry's record (``rec["output"]`` is set)."""

    def output(self, item: Started) -> str:
        """The file name (in the variant's folder) of the entry's main output."""
        return f"workload-{item.index}-{self.NAME}.out"


#: the workload kinds by name (:class:`topologies.plugins.Registry`)
KINDS = plugins.Registry("workload kind", WorkloadKind)
register = KINDS.register


def kind(name: str, where: str = "kind") -> WorkloadKind:
    """An instance of the kind named ``name`` (registered, or ``package.module:Class``)."""
    try:
        return KINDS.resolve(name, where)()
    except ParamError as exc:
        raise ConfigError(exc.field, exc.reason) from None


def parameters(cls: type[WorkloadKind], given: dict | None, where: str) -> dict:
    """A plug-in entry's ``params:``, checked by its kind's model."""
    if cls.PARAMS is None:
        if given:
            raise ConfigError(f"{where}.{next(iter(given))}", f"not used by {cls.NAME}")
        return {}
    return parse_section(cls.PARAMS, dict(given or {}), where).model_dump()


def address(spec: FabricSpec, node: int, plane: int = 0, rail: int = 0) -> str:
    return spec.hosts[node].interface(plane, rail).ip


def expand(arg: str, spec: FabricSpec) -> str:
    """``{n5}`` -> host n5's address on plane 0 (rail 0), ``{n5.p1}`` on plane 1.

    >>> from topologies.leafspine import build_fabric
    >>> spec = build_fabric(prefix="tbdoc0", planes=2, nodes=4)
    >>> expand("ping -c1 {n3} {n2.p1}", spec)
    'ping -c1 10.0.0.4 10.1.0.3'
    """
    return PLACEHOLDER.sub(lambda m: address(spec, int(m.group(1)), int(m.group(2) or 0)),
                           arg)


# -- the built-in kinds ----------------------------------------------------------------
@register
class Command(WorkloadKind):
    """Any command in a host; ``{n5}`` in an argument is host n5's address."""

    NAME = "command"

    def check(self, entry: dict, spec: FabricSpec, where: str) -> None:
        for j, arg in enumerate(entry["argv"]):
            for m in PLACEHOLDER.finditer(arg):
                node, plane = int(m.group(1)), int(m.group(2) or 0)
                if node >= len(spec.hosts) or plane >= spec.planes:
                    raise ConfigError(f"{where}.argv[{j}]",
                                      f"{m.group(0)} names no host address of this fabric")

    def start(self, run: ExtraWorkloads, item: Started) -> None:
        e = item.entry
        run.spawn(item, "command", e["host"], [expand(a, run.spec) for a in e["argv"]],
                  stdout_file=run.out / self.output(item))


@register
class Iperf3(WorkloadKind):
    """An iperf3 client and its server (which listens from before traffic starts)."""

    NAME = "iperf3"
    HOSTS = ("client", "server")

    def check(self, entry: dict, spec: FabricSpec, where: str) -> None:
        if entry["client"] == entry["server"]:
            raise ConfigError(f"{where}.server", "must differ from client")

    def output(self, item: Started) -> str:
        return f"workload-{item.index}-iperf3.json"

    def prepare(self, run: ExtraWorkloads, item: Started) -> None:
        e = item.entry
        run.spawn(item, "server", e["server"],
                  iperf3.server(address(run.spec, e["server"], e["plane"]),
                                iperf3.BASE_PORT + item.index))

    def start(self, run: ExtraWorkloads, item: Started) -> None:
        e = item.entry
        run.spawn(item, "client", e["client"], iperf3.client(
            address(run.spec, e["server"], e["plane"]), iperf3.BASE_PORT + item.index,
            seconds=e["seconds"], bind=address(run.spec, e["client"], e["plane"]),
            udp=e["udp"], rate_mbps=e["rate_mbps"], parallel=e["parallel"]),
            stdout_file=run.out / self.output(item))

    def record(self, run: ExtraWorkloads, item: Started, rec: dict) -> None:
        rec["goodput_mbps"] = iperf3.goodput_mbps(iperf3.read(run.out / rec["output"]))


@register
class Replay(WorkloadKind):
    """A capture replayed out of a host's NIC (``python -m traffic replay``)."""

    NAME = "replay"

    def check(self, entry: dict, spec: FabricSpec, where: str) -> None:
        if entry["rail"] >= spec.rails:
            raise ConfigError(f"{where}.rail", f"must be below {spec.rails} (the fabric's rails)")
        if not Path(entry["pcap"]).is_file():
            raise ConfigError(f"{where}.pcap", f"no such file {entry['pcap']!r}")
        if entry["pps"] and entry["mbps"]:
            raise ConfigError(f"{where}.mbps", "give pps or mbps, not both")

    def output(self, item: Started) -> str:
        return f"workload-{item.index}-replay.json"

    def start(self, run: ExtraWorkloads, item: Started) -> None:
        e = item.entry
        iface = run.spec.hosts[e["host"]].interface(e["plane"], e["rail"]).name
        rate = (["--pps", f"{e['pps']:g}"] if e["pps"] else
                ["--mbps", f"{e['mbps']:g}"] if e["mbps"] else ["--topspeed"])
        run.spawn(item, "replay", e["host"],
                  [*TRAFFIC, "replay", "--iface", iface, "--pcap", e["pcap"],
                   "--loop", str(e["loop"]), *rate], stdout_file=run.out / self.output(item))

    def record(self, run: ExtraWorkloads, item: Started, rec: dict) -> None:
        rec["replay"] = last_json(run.out / rec["output"])


@register
class Elephants(WorkloadKind):
    """One long TCP flow (iperf3) from every host, to a destination by a Hedera pattern."""

    NAME = "elephants"
    HOSTS = ()

    def check(self, entry: dict, spec: FabricSpec, where: str) -> None:
        nodes = len(spec.hosts)
        hosts = entry["hosts"] or list(range(nodes))
        for j, node in enumerate(hosts):
            if not 0 <= node < nodes:
                raise ConfigError(f"{where}.hosts[{j}]",
                                  f"must be a node index 0..{nodes - 1}, got {node!r}")
        if len(set(hosts)) != len(hosts) or len(hosts) < 2:
            raise ConfigError(f"{where}.hosts", "needs at least 2 different node indices")
        if entry["pattern"] == "stride" and entry["stride"] % len(hosts) == 0:
            raise ConfigError(f"{where}.stride", f"{entry['stride']} sends every host to "
                                                 f"itself with {len(hosts)} hosts")
        if entry["edge_p"] + entry["pod_p"] > 1:
            raise ConfigError(f"{where}.pod_p", "edge_p + pod_p must not exceed 1")
        if entry["pod_hosts"] % entry["edge_hosts"]:
            raise ConfigError(f"{where}.pod_hosts", "must be a multiple of edge_hosts")
        if entry["pattern"] == "staggered" and not (
                2 <= entry["edge_hosts"] < entry["pod_hosts"] < len(hosts)):
            raise ConfigError(f"{where}.edge_hosts", "staggered needs edge switches of 2 or "
                                                     "more hosts, pods of several edges and "
                                                     "several pods (edge_hosts < pod_hosts "
                                                     "< hosts)")
        if entry["pattern"] == "hotspot" and entry["hotspots"] * entry["hot_flows"] >= len(hosts):
            raise ConfigError(f"{where}.hotspots", f"{entry['hotspots']} x hot_flows "
                                                   f"{entry['hot_flows']} must be below the "
                                                   f"{len(hosts)} hosts")

    def output(self, item: Started) -> str:
        return f"workload-{item.index}-flow0.json"

    @staticmethod
    def port(item: Started, k: int) -> int:
        return ELEPHANT_BASE_PORT + 1000 * item.index + k

    def prepare(self, run: ExtraWorkloads, item: Started) -> None:
        e = item.entry
        item.state["flows"] = elephant_flows(e, len(run.spec.hosts), run.seed)
        for k, (_, dst) in enumerate(item.state["flows"]):
            run.spawn(item, f"flow{k}-server", dst,
                      iperf3.server(address(run.spec, dst, e["plane"]), self.port(item, k)))

    def start(self, run: ExtraWorkloads, item: Started) -> None:
        e = item.entry
        seconds = e["seconds"] or max(1.0, run.duration_s - e["at_s"] - ELEPHANT_MARGIN_S)
        for k, (src, dst) in enumerate(item.state["flows"]):
            run.spawn(item, f"flow{k}", src, iperf3.client(
                address(run.spec, dst, e["plane"]), self.port(item, k), seconds=seconds,
                bind=address(run.spec, src, e["plane"])),
                stdout_file=run.out / f"workload-{item.index}-flow{k}.json")

    def record(self, run: ExtraWorkloads, item: Started, rec: dict) -> None:
        rec["pattern"] = elephant_label(item.entry)
        rec["flows"] = [
            {"src": src, "dst": dst, "goodput_mbps": iperf3.goodput_mbps(iperf3.read(
                run.out / f"workload-{item.index}-flow{k}.json"))}
            for k, (src, dst) in enumerate(item.state["flows"])]


def elephant_label(entry: dict) -> str:
    """The pattern as Hedera's figures name it: stride4, stag(0.2,0.3), rand, randbij,
    hotspot.

    >>> elephant_label({"pattern": "stride", "stride": 4})
    'stride4'
    >>> elephant_label({"pattern": "staggered", "edge_p": 0.5, "pod_p": 0.3})
    'stag(0.5,0.3)'
    """
    p = entry["pattern"]
    if p == "stride":
        return f"stride{entry['stride']}"
    if p == "staggered":
        return f"stag({entry['edge_p']:g},{entry['pod_p']:g})"
    return {"random": "rand", "bijection": "randbij"}.get(p, p)


def elephant_flows(entry: dict, n_hosts: int, seed: int) -> list[tuple[int, int]]:
    """(sender, receiver) node indices of an elephants entry's flows, drawn from ``seed``.

    >>> elephant_flows({"pattern": "stride", "stride": 2, "hosts": [0, 1, 4, 5]}, 8, 1)
    [(0, 4), (1, 5), (4, 0), (5, 1)]
    """
    hosts = entry.get("hosts") or list(range(n_hosts))
    dest = hedera(entry["pattern"], len(hosts), stride=entry.get("stride", 1),
                  edge_hosts=entry.get("edge_hosts", 1), pod_hosts=entry.get("pod_hosts", 1),
                  edge_p=entry.get("edge_p", 0.0), pod_p=entry.get("pod_p", 0.0),
                  hotspots=entry.get("hotspots", 1), hot_flows=entry.get("hot_flows", 1),
                  seed=seed)
    return [(hosts[i], hosts[j]) for i, j in enumerate(dest)]


def last_json(path: Path) -> dict | None:
    """The last line of ``path`` that is a JSON object, or None."""
    try:
        lines = [ln for ln in path.read_text().splitlines() if ln.startswith("{")]
        return json.loads(lines[-1]) if lines else None
    except (OSError, ValueError):
        return None


# -- running a variant's entries --------------------------------------------------------
class ExtraWorkloads:
    """The ``workloads:`` entries other than agents and training, started on time, each
    by its kind."""

    def __init__(self, fabric: Fabric, entries: list[dict], *, out: Path, pid_dir: Path,
                 stack: ExitStack, seed: int, duration_s: float) -> None:
        self.fabric, self.spec = fabric, fabric.spec
        self.out, self.pid_dir, self.stack = out, pid_dir, stack
        self.seed, self.duration_s = seed, duration_s
        self.items = [Started(i, e) for i, e in enumerate(entries)]
        self.kinds = [kind(e["kind"]) for e in entries]
        self.schedule: Schedule | None = None

    def spawn(self, item: Started, name: str, host: int, argv: list[str],
              stdout_file: Path | None = None) -> Helper:
        """A process of entry ``item`` in host ``host`` (a node index), stopped with the
        run; its log is ``workload-INDEX-NAME.log``."""
        proc = self.fabric.host(self.spec.hosts[host].name).spawn(
            f"wl{item.index}-{name}", argv, pid_dir=self.pid_dir,
            log=self.out / f"workload-{item.index}-{name}.log", env=python_env(),
            stdout_file=stdout_file)
        self.stack.callback(proc.stop)
        item.procs.append(proc)
        return proc

    def start(self, t0: float) -> None:
        """What each kind prepares (servers) now; every entry's own processes at
        ``t0 + at_s``."""
        for item, k in zip(self.items, self.kinds, strict=True):
            k.prepare(self, item)
        faults = [Fault(item.entry["at_s"], "start", str(item.index)) for item in self.items]
        self.schedule = Schedule(faults, {"start": lambda i: self._start(int(i))})
        self.schedule.start(t0)

    def _start(self, i: int) -> None:
        """Start entry ``i``; it counts as started once its processes exist (:meth:`wait`
        ends when every started entry's processes have ended: marked before them, an
        entry looked ended in the moment between). A start that raises is the entry's
        ``error`` (and the schedule's record)."""
        item, t = self.items[i], time.time()
        try:
            self.kinds[i].start(self, item)
        except Exception as exc:
            item.error = f"{type(exc).__name__}: {exc}"[:500]
            raise
        finally:
            item.started = t

    def wait(self, until: float) -> None:
        """Until every process that ends by itself has ended, or ``until`` (epoch)."""
        def done() -> bool:
            started = all(item.started for item in self.items)
            return started and not any(p.alive() for item in self.items for p in item.procs
                                       if not p.name.endswith("-server"))
        wait_for(lambda: time.time() >= until or done(), max(0.0, until - time.time()) + 1,
                 interval=0.2)

    def stop(self) -> list[dict]:
        """Stop what still runs and return the ``workloads`` records of the run."""
        if self.schedule:
            self.schedule.stop()
            self.schedule.join(5)
        return [self._record(item, k) for item, k in zip(self.items, self.kinds, strict=True)]

    def _record(self, item: Started, k: WorkloadKind) -> dict:
        e = item.entry
        main = item.procs[-1] if item.procs and item.started else None
        ran_out = main is not None and main.alive()
        code = main.stop() if main is not None else None
        for proc in item.procs[:-1]:
            proc.stop()
        rec: dict[str, Any] = {"index": item.index, "kind": k.NAME, "at_s": e["at_s"],
                               "started": item.started is not None,
                               "exit_status": None if ran_out else code,
                               "stopped_at_end": ran_out}
        if item.error:
            rec["error"] = item.error
        rec.update({key: e[key] for key in ("host", "client", "server") if key in e})
        rec["output"] = k.output(item)
        k.record(self, item, rec)
        return rec
