"""A fabric with its controller, brought up and checked: the one place that starts both.

Every undo step goes on the caller's ExitStack right after the resource exists.
"""

from __future__ import annotations

import json
import shutil
import socket
import sys
from collections.abc import Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path

from pydantic import ValidationError

from controllers.config import ControllerConfig, ecn_backend
from testbed.cluster.servers import Server
from testbed.core import layout
from testbed.errors import BringUpError
from testbed.fabric import phantom
from testbed.fabric.net import Fabric, FabricTimes
from testbed.fabric.qos import Qos, classes_of
from testbed.fabric.switchd import SwitchSettings
from testbed.host.capabilities import Capabilities
from testbed.host.files import read_jsonl, write_json
from testbed.host.hosts import RootHost
from testbed.host.naming import claim
from testbed.host.procs import Helper, wait_for
from topologies import plugins
from topologies.spec import FabricSpec

#: how long the controller may take to install the paths on every switch
PATHS_WAIT_S = 30.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _events(path: Path, event: str) -> list[dict]:
    return [e for e in read_jsonl(path) if e.get("event") == event]


@dataclass
class LiveFabric:
    """A fabric with its controller, up and checked; torn down by the stack it was given."""

    fabric: Fabric
    #: the lab's controller process; None with a remote controller (the user's)
    controller: Helper | None
    status: Path
    pid_dir: Path
    times: FabricTimes
    #: nftables table of the phantom-queue marker (ECN backend ``phantom``), else None
    phantom_table: str | None = None
    #: where the controller serves Prometheus metrics (``controller.prometheus_port``)
    metrics_url: str | None = None

    @property
    def spec(self) -> FabricSpec:
        return self.fabric.spec


def ecn_lacks(mode: str, caps: Capabilities) -> str | None:
    """Why ``ecn.mode`` cannot mark on a host with ``caps`` (None: it can); checked by
    a run before anything is created and by the bring-up of any fabric.

    >>> from types import SimpleNamespace
    >>> no_red = SimpleNamespace(red=False, nftables=True)
    >>> ecn_lacks("switch", no_red)[:30], ecn_lacks("auto", no_red)
    ("'switch' marking needs the RED", None)
    """
    if mode == "switch" and not caps.red:
        return ("'switch' marking needs the RED qdisc, which this kernel lacks; use 'auto' "
                "(RED where present, else the controller marks)")
    if mode == "phantom" and not caps.nftables:
        return ("'phantom' marking needs nftables (the nft command and nf_tables in the "
                "kernel), which this host lacks")
    return None


def controller_config(controller: dict, spec: FabricSpec, caps: Capabilities, *,
                      out: Path, seed: int = 1, telemetry: bool = True) -> dict:
    """:func:`controller_model` as the file's JSON object."""
    return controller_model(controller, spec, caps, out=out, seed=seed,
                            telemetry=telemetry).model_dump(mode="json")


def controller_model(controller: dict, spec: FabricSpec, caps: Capabilities, *,
                     out: Path, seed: int = 1, telemetry: bool = True) -> ControllerConfig:
    """The controller's one configuration file (:mod:`controllers.config`): the variant's
    controller section plus the spec, status and telemetry files in ``out``, the seed
    and who marks CE (``ecn.mode: auto`` resolved from the host's RED),
    validated with the controller's own model; BringUpError if impossible."""
    config = {**controller, "spec": str(out / layout.SPEC),
              "status": str(out / layout.CONTROLLER_EVENTS),
              "telemetry": str(out / layout.TELEMETRY) if telemetry else None,
              "seed": seed,
              "plugin_path": plugins.folders()}
    ecn_mode = (controller.get("ecn") or {}).get("mode", "off")
    if reason := ecn_lacks(ecn_mode, caps):
        raise BringUpError(f"controller.ecn.mode: {reason}")
    config["ecn_backend"] = ecn_backend(ecn_mode, red=caps.red)
    try:  # the model the controller reads it with: refused here, not in its process
        return ControllerConfig.model_validate(config)
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(part) for part in err["loc"])
        raise BringUpError(f"controller.{where}: {err['msg']}") from None


def bring_up(spec: FabricSpec, caps: Capabilities, *, run_id: str, out: Path,
             stack: ExitStack, mode: str | None = None,
             controller: dict | None = None, telemetry: bool = True,
             seed: int = 1, qos: Qos | dict | None = None,
             switches: dict | None = None, servers: Sequence[Server] = ()) -> LiveFabric:
    """Start the controller and the fabric for ``spec``; every undo step goes on ``stack``.

    ``controller`` is the variant's resolved controller section (``mode`` alone is the
    older form); ``seed`` seeds the controller's random draws; ``switches`` the
    variant's ``switches`` section (:class:`testbed.fabric.switchd.SwitchSettings`);
    ``servers`` the other machines the fabric is spread over
    (:mod:`testbed.cluster.runtime`: each is checked before the controller starts).
    Returns once the controller has installed the paths on every switch and the first and last host
    reach each other on every plane.
    """
    out.mkdir(parents=True, exist_ok=True)
    spec.to_json(out / layout.SPEC)
    model = controller_model(controller or {"mode": mode or "ecmp"}, spec, caps, out=out,
                             seed=seed, telemetry=telemetry)  # validated once
    settings = SwitchSettings.model_validate(switches or {})
    config_file = out / layout.CONTROLLER_CONFIG
    write_json(config_file, model.model_dump(mode="json"))
    pids = claim(run_id)
    stack.callback(shutil.rmtree, pids, ignore_errors=True)

    conns = []
    if servers:
        from testbed.cluster import placement
        from testbed.cluster.runtime import connect
        from testbed.cluster.servers import record as record_servers

        if model.remote:
            raise BringUpError("servers: a fabric over several machines runs the lab's own "
                               "controller, not a remote one")
        place = placement.place(spec, 1 + len(servers))
        conns, tunnel = connect(servers, spec, place, run_id=run_id, folder=pids)
        for conn in conns:
            stack.callback(conn.close)
        record_servers(pids, conns)
        write_json(out / layout.PLACEMENT, {
            "servers": ["here", *[str(s) for s in servers]], "tunnel": tunnel,
            **place.to_dict()})
    if model.remote:
        return _bring_up_remote(spec, caps, run_id=run_id, remote=model.remote,
                                status=Path(model.status), pids=pids, stack=stack,
                                switches=settings, out=out)
    port = free_port()
    status = Path(model.status)
    controller_proc = Helper(
        "controller",
        [sys.executable, "-m", "controllers", "--config", str(config_file), "--port", str(port)],
        pid_dir=pids, log=out / layout.CONTROLLER_LOG,
    )
    stack.callback(controller_proc.stop)
    # os-ken's import alone takes about 10 s in the emulated lab VM (make vm-test)
    if not wait_for(lambda: _events(status, "started"), 60):
        raise BringUpError(f"controller did not start (see {out / 'controller.log'})")

    red = None
    if model.ecn_backend == "switch":  # the class that marks earliest sets the queue
        classes = model.ecn.classes.by_name().values()
        red = min(classes, key=lambda c: c.min_kb).model_dump()
    qos_section = qos if isinstance(qos, Qos) else Qos.model_validate(qos or {})
    classes = classes_of(qos_section)
    if conns:
        from testbed.cluster.runtime import ClusterFabric

        fabric = ClusterFabric(spec, caps, conns=conns, place=place, log_dir=out, tunnel=tunnel,
                               qos=qos_section.model_dump(mode="json"), run_id=run_id,
                               controller_port=port, red=red, classes=classes,
                               switches=settings)
    else:
        fabric = Fabric(spec, caps, run_id=run_id, controller_port=port, red=red,
                        classes=classes, switches=settings, log_dir=out)
    stack.callback(fabric.stop)
    n = len(spec.switches)

    def await_paths() -> None:
        installed = lambda: {e["dpid"] for e in _events(status, "installed")}  # noqa: E731
        if not wait_for(lambda: len(installed()) >= n, PATHS_WAIT_S):
            raise BringUpError(f"controller installed paths on {len(installed())} of {n} "
                               f"switches in {PATHS_WAIT_S:g} s")

    times = fabric.start(await_paths)
    metrics_url = _metrics_url(status, model.prometheus_port)
    if classes and caps.htb:  # per-class counters, and PFC if asked for
        start_pfc_agent(fabric, qos_section, out=out, pid_dir=pids, stack=stack)
    table = None
    if model.ecn_backend == "phantom":  # per-packet marking in the ports' egress path
        table = phantom.install(spec, model.ecn.classes.by_name(), model.ecn.drain, stack)
    return LiveFabric(fabric=fabric, controller=controller_proc, status=status, pid_dir=pids,
                      times=times, phantom_table=table, metrics_url=metrics_url)


def _metrics_url(status: Path, port: int | str | None) -> str | None:
    """The controller's Prometheus URL, once its exporter has said where it listens;
    a fixed port another program holds ends the bring-up in one line."""
    if not port:
        return None
    wait_for(lambda: _events(status, "prometheus") or _events(status, "prometheus_failed"), 10)
    for failed in _events(status, "prometheus_failed"):
        raise BringUpError(f"controller.prometheus_port: 127.0.0.1:{failed['port']}: "
                           f"{failed['error']} (another lab's?); give another port, or auto")
    found = _events(status, "prometheus")
    if not found:
        raise BringUpError("controller.prometheus_port: the controller did not start its "
                           "metrics server in 10 s")
    return found[-1]["url"]


def start_pfc_agent(fabric: Fabric, section: Qos, *, out: Path, pid_dir: Path,
                    stack: ExitStack) -> Helper:
    """The agent of :mod:`testbed.fabric.pfc` for every port with traffic classes: per-class
    counters always, PAUSE frames when ``pfc.enabled``. Its record is ``pfc.json``."""
    spec, pfc = fabric.spec, section.pfc
    peer = {}
    for lk in spec.links:
        peer[lk.a_intf], peer[lk.b_intf] = lk.b_intf, lk.a_intf
    ports = [{"ifname": p.ifname, "netns": None, "mbps": p.mbps, "switch": p.switch,
              "role": p.role, "peer": peer[p.ifname]} for p in spec.switch_ports()]
    for host in spec.hosts:
        ns = f"/proc/{fabric.host_pid(host.name)}/ns/net"
        for intf in host.interfaces:
            ports.append({"ifname": intf.name, "netns": ns, "peer": peer[intf.name],
                          "switch": None, "role": "host_nic",
                          "mbps": fabric.host_link_mbps.get(intf.name, spec.link_mbps)})
    switches: dict[str, list[str]] = {}
    for p in spec.switch_ports():
        switches.setdefault(p.switch, []).append(p.ifname)
    storm = out / layout.PFC_STORMS
    if pfc.enabled:  # where fault kind pfc_storm flags a host NIC
        storm.mkdir(parents=True, exist_ok=True)
    config = {"pfc": pfc.enabled, "poll_ms": pfc.poll_ms, "pause_ms": pfc.pause_ms,
              "xoff": int(pfc.xoff_kb * 1000), "xon": int(pfc.xon_kb * 1000),
              "watchdog_ms": pfc.watchdog_ms, "restore_ms": pfc.restore_ms,
              "mtu": spec.mtu, "ports": ports, "switches": switches,
              "classes": [asdict(c) for c in fabric.planned_classes(spec.link_mbps)],
              "out": str(out / layout.PFC), "events": str(out / layout.PFC_EVENTS),
              "samples": str(out / layout.CLASS_TELEMETRY),
              "storm_dir": str(storm), "ready": str(pid_dir / "pfc.ready")}
    write_json(out / layout.PFC_CONFIG, config)
    agent = Helper("pfc", [sys.executable, "-m", "testbed.fabric.pfc", "--config",
                           str(out / layout.PFC_CONFIG)], pid_dir=pid_dir,
                           log=out / layout.PFC_LOG)
    stack.callback(agent.stop)
    if not wait_for(lambda: Path(config["ready"]).exists() or not agent.alive(), 30):
        raise BringUpError(f"the PFC agent did not start in 30 s (see {out / 'pfc.log'})")
    if not agent.alive():
        raise BringUpError(f"the PFC agent failed (see {out / 'pfc.log'})")
    return agent


def _bring_up_remote(spec: FabricSpec, caps: Capabilities, *, run_id: str, remote: str,
                     status: Path, pids: Path, stack: ExitStack,
                     switches: SwitchSettings, out: Path) -> LiveFabric:
    """The fabric with its switches connected to the user's controller (``127.0.0.1:P``):
    nothing of ours is installed; up once every switch is connected."""
    port = int(remote.rsplit(":", 1)[1])
    fabric = Fabric(spec, caps, run_id=run_id, controller_port=port, switches=switches,
                    log_dir=out)
    stack.callback(fabric.stop)
    names = {sw.name for sw in spec.switches}

    def connected() -> int:
        if fabric.daemons is None:
            return _connected(["ovs-vsctl"], sorted(names))
        return sum(_connected(["ovs-vsctl", f"--db={inst.remote}"], inst.bridges)
                   for inst in fabric.daemons.instances)

    def await_connected() -> None:
        if not wait_for(lambda: connected() >= len(names), 30, interval=0.25):
            raise BringUpError(f"{connected()} of {len(names)} switches connected to the "
                               f"remote controller at {remote} in 30 s")

    times = fabric.start(await_connected, check=False)
    return LiveFabric(fabric=fabric, controller=None, status=status, pid_dir=pids,
                      times=times)


def _connected(vsctl: list[str], bridges: list[str]) -> int:
    """How many of ``bridges`` (in the database ``vsctl`` talks to) have a connected
    controller."""
    done = RootHost().run(vsctl + ["--format=json", "--columns=_uuid,controller", "list",
                                   "Bridge", *bridges])
    rows = RootHost().run(vsctl + ["--format=json", "--columns=_uuid,is_connected", "list",
                                   "Controller"])
    if done.returncode or rows.returncode:
        return 0
    up = {r[0][1] for r in json.loads(rows.stdout)["data"] if r[1] is True}
    count = 0
    for _, ctl in json.loads(done.stdout)["data"]:
        uuids = [ctl[1]] if ctl[0] == "uuid" else [u[1] for u in ctl[1]]
        count += any(u in up for u in uuids)
    return count


def queue_summary(stats: dict[str, dict[str, int]], roles: dict[str, str]) -> dict:
    """Egress bytes and drops summed by port role, plus the port that dropped most."""
    out: dict = {role: {"ports": 0, "bytes": 0, "drops": 0} for role in sorted(set(roles.values()))}
    for ifname, counters in stats.items():
        agg = out[roles[ifname]]
        agg["ports"] += 1
        agg["bytes"] += counters["bytes"]
        agg["drops"] += counters["drops"]
    worst = max(stats.items(), key=lambda kv: kv[1]["drops"], default=None)
    out["most_drops"] = ({"port": worst[0], "role": roles[worst[0]], **worst[1]}
                         if worst and worst[1]["drops"] else None)
    return out


