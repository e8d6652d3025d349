"""The lab commands of ``testbed`` and their parsers: ls, inspect, dashboard, accept,
expand, exec, cli, fault, capture, down; ``up`` is :mod:`.up`.

Each checks its input first (unknown lab, host, fault kind or port: one line, exit
status 2, nothing created), then acts: ``fault``, ``accept``, ``expand`` and ``cli`` (on a
fabric: :mod:`.attach`) talk to the lab's supervisor, which holds the live objects;
``exec``, ``cli`` on a router (vtysh) and ``capture`` enter the namespace themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from testbed.errors import ConfigError, HostError
from testbed.host.naming import run_dir
from testbed.lab import state
from testbed.lab.attach import attach_cli
from testbed.lab.client import DOWN_TIMEOUT_S, lab_class, name_width, need_root, request
from testbed.lab.up import cmd_up
from testbed.numbers import flag

#: the longest acceptance a lab may take before ``testbed accept`` gives up waiting
ACCEPT_TIMEOUT_S = 600


# -- ls --------------------------------------------------------------------------------
def cmd_ls(args) -> int:
    labs = state.all_labs()
    if args.json:
        print(json.dumps(labs, indent=1))
        return 0
    if not labs:
        print("no labs")
        return 0
    rows = [("NAME", "KIND", "SCENARIO/VARIANT", "AGE", "SIZE", "OWNER", "STATE")]
    for r in labs:
        owner = r.get("owner", {})
        status = r.get("state", "up") if r["alive"] else "dead (testbed clean removes it)"
        rows.append((r["name"], r["kind"], f"{r['scenario']}/{r['variant']}", state.age(r),
                     state.size(r), f"{owner.get('user')}/{owner.get('pid')}", status))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return 0


# -- inspect ---------------------------------------------------------------------------
def inspect_lines(record: dict) -> list[str]:
    """What ``testbed inspect`` prints: the lab, its controller, every host or router with
    its addresses, every switch with its datapath id and ports (or every backbone link)."""
    lines = [f"lab {record['name']}: {record['kind']} {record['scenario']}/"
             f"{record['variant']}, run {record['run_id']} (prefix "
             f"{record.get('prefix', '?')}), up {state.age(record)}, {state.size(record)}, "
             f"{'alive' if record['alive'] else 'dead'}",
             f"results: {record['out']}"]
    controller = record.get("controller") or {}
    if controller.get("remote"):
        lines.append(f"controller: remote, {controller['remote']}")
    elif controller:
        lines.append(f"controller: pid {controller.get('pid')}, OpenFlow "
                     f"{controller.get('openflow', '?')}"
                     + (f", metrics {controller['metrics']}" if controller.get("metrics") else "")
                     + f", log {controller.get('log')}")
    if record.get("monitor"):
        monitor = record["monitor"]
        lines.append(f"monitor: pid {monitor['pid']}, dashboard {monitor['url']}, "
                     f"metrics {monitor['metrics']}")
    if record.get("prometheus"):
        lines.append(f"prometheus: pid {record['prometheus']['pid']}, "
                     f"{record['prometheus']['url']}")
    lab = lab_class(record)
    lines.append(f"{lab.NODES}:")
    width = name_width(record, 8)
    for short, host in record["hosts"].items():
        extra = f" [{host['role']}]" if host.get("role") else ""
        extra += f" (on {host['server']})" if host.get("server") else ""
        lines.append(f"  {short:<{width}}{', '.join(host['addresses'])}{extra}")
    return lines + lab.inspect_lines(record)


def cmd_inspect(args) -> int:
    record = state.find(args.lab, live=False)
    if args.json:
        print(json.dumps({**record, **lab_class(record).inspect_json(record)}, indent=1))
        return 0
    print("\n".join(inspect_lines(record)))
    return 0


# -- dashboard -------------------------------------------------------------------------
def cmd_dashboard(args) -> int:
    record = state.find(args.lab)
    monitor = record.get("monitor")
    if not monitor:
        raise ConfigError("LAB", f"lab {args.lab!r} runs no monitor")
    print(f"dashboard:  {monitor['url']}\nmetrics:    {monitor['metrics']}")
    if record.get("prometheus"):
        print(f"prometheus: {record['prometheus']['url']}")
    return 0


# -- accept ----------------------------------------------------------------------------
def _checks(value: str | None) -> list[str] | None:
    """``--checks``: the acceptance checks named, in their order; None: all."""
    if value is None:
        return None
    from testbed.acceptance.run import CHECKS

    checks = [c.strip() for c in value.split(",") if c.strip()]
    unknown = [c for c in checks if c not in CHECKS]
    if unknown or not checks:
        said = f"unknown check {unknown[0]!r}" if unknown else "names no check"
        raise ConfigError("--checks", f"{said} (checks: {', '.join(CHECKS)})")
    return checks


def _fabric_lab(name: str, what: str) -> dict:
    record = state.find(name)
    if record["kind"] != "fabric":
        raise ConfigError("LAB", f"{what} a fabric; {name!r} is a {record['kind']} lab")
    return record


def cmd_accept(args) -> int:
    checks = _checks(args.checks)  # before anything else: bad input touches nothing
    record = _fabric_lab(args.lab, "acceptance checks")
    reply = request(record, {"op": "accept", "checks": checks, "exclude": args.exclude},
                     timeout=ACCEPT_TIMEOUT_S)
    if not reply.get("ok"):
        raise HostError(f"lab {record['name']}: {reply.get('error')}")
    result = reply["result"]
    print("\n".join(reply["lines"]))
    print(f"{'accepted' if result['accepted'] else 'NOT accepted'}: "
          f"{Path(record['out']) / 'acceptance.json'}")
    return 0 if result["accepted"] else 1


# -- expand ----------------------------------------------------------------------------
def cmd_expand(args) -> int:
    from testbed.acceptance.schema import PLANT_KINDS
    from testbed.operations.expand import RECORD, grown_spec, planted_in
    from topologies.spec import FabricSpec

    checks = _checks(args.checks)
    plant = []
    for i, word in enumerate(args.plant or []):
        action, _, target = word.partition(":")
        if action not in PLANT_KINDS:
            raise ConfigError(f"--plant[{i}]", f"unknown fault {action!r} (faults: "
                                               f"{', '.join(PLANT_KINDS)})")
        plant.append({"action": action, "target": target or "random"})
    record = _fabric_lab(args.lab, "racks are added to")
    spec = FabricSpec.from_json(Path(record["spec"]))
    grown_spec(spec, args.leaves, args.nodes)
    planted_in(spec, args.leaves, args.nodes, plant, args.seed)  # the targets checked
    reply = request(record, {"op": "expand", "leaves": args.leaves, "nodes": args.nodes,
                              "checks": checks, "plant": plant, "seed": args.seed},
                     timeout=ACCEPT_TIMEOUT_S)
    if not reply.get("ok"):
        if reply.get("code") == 2:
            field, _, reason = reply["error"].partition(": ")
            raise ConfigError(field, reason)
        raise HostError(f"lab {record['name']}: {reply.get('error')}")
    result = reply["result"]
    print("\n".join(reply["lines"]))
    accepted = result["acceptance"]["accepted"]
    print(f"rack {'accepted' if accepted else 'NOT accepted (what passed is routed)'}: "
          f"{Path(record['out']) / RECORD}")
    return 0 if accepted else 1


# -- exec ------------------------------------------------------------------------------
def _command(words: list[str]) -> list[str]:
    return words[1:] if words[:1] == ["--"] else words


def cmd_exec(args) -> int:
    record = state.find(args.lab)
    host = state.host(record, args.host)
    need_root("testbed exec")
    argv = _command(args.command) or ["bash", "-i"]
    env = {**os.environ, "PS1": f"{record['name']}:{args.host}# "}
    try:
        return subprocess.run(host.argv(argv), env=env).returncode
    except KeyboardInterrupt:
        return 130


# -- cli -------------------------------------------------------------------------------
def cmd_cli(args) -> int:
    record = state.find(args.lab)
    argv = lab_class(record).cli_argv(record, args.node, args.command)  # checks the node
    need_root("testbed cli")
    if argv is None:  # the lab's supervisor serves it
        return attach_cli(record, args.command)
    return subprocess.run(argv).returncode


# -- fault -----------------------------------------------------------------------------
#: the options of ``testbed fault`` whose name is not their parameter's
FLAGS = {"period_s": "--period"}


def fault_kinds_lines() -> list[str]:
    """What ``testbed fault --list`` prints: every fault kind of a fabric lab (target and
    parameters) and every action of a backbone lab."""
    from testbed.experiments.backbone import faults as backbone_kinds
    from testbed.faults.kinds import KINDS

    targets = {"link": "LINK (p0l0-p0s1, n0-p0l0)", "switch": "SWITCH (p0s1)",
               "plane": "PLANE (p1)", "rail": "NIC (n2p0r0)", None: "(no target)"}
    lines = ["fabric labs: testbed fault LAB KIND TARGET [--param value]"]
    for name, cls in KINDS.items():
        params = " ".join(f"{FLAGS.get(f, '--' + f.replace('_', '-'))} {f.upper()}"
                          for f in (cls.PARAMS.model_fields if cls.PARAMS else {}))
        needs = f"  (needs {cls.NEEDS})" if cls.NEEDS else ""
        doc = " ".join((cls.__doc__ or "").strip().split("\n\n")[0].split())
        doc = doc.replace("``", "").replace(":mod:", "")
        doc = doc.split(". ")[0].rstrip(".") + "." if doc else ""
        lines.append(f"  {name:<20}{targets.get(cls.TARGET, cls.TARGET)} {params}{needs}"
                     .rstrip() + (f"\n  {'':<20}{doc}" if doc else ""))
    lines.append("backbone labs: testbed fault LAB ACTION TARGET")
    for name, cls in backbone_kinds.KINDS.items():
        target = cls.TARGET
        what = target.upper().replace(" ", "-") + (" (nyc-lon-1, ...)" if target == "link"
                                                    else "")
        loss = " --loss FRACTION" if backbone_kinds.takes_loss(cls) else ""
        lines.append(f"  {name:<24}{what}{loss}")
    return lines


def cmd_fault(args) -> int:
    if args.list:
        print("\n".join(fault_kinds_lines()))
        return 0
    if not args.lab or not args.kind:
        raise ConfigError("LAB", "name a lab and a fault kind (testbed fault LAB KIND "
                                 "TARGET), or --list for the kinds")
    record = state.find(args.lab)
    reply = request(record, {"op": "fault", "kind": args.kind, "target": args.target,
                              "loss": args.loss, "period_s": args.period, "count": args.count,
                              "delay_ms": args.delay_ms, "jitter_ms": args.jitter_ms,
                              "rate_mbps": args.rate_mbps, "burst_kb": args.burst_kb})
    if not reply.get("ok"):
        if reply.get("code") == 2:
            field, _, reason = reply["error"].partition(": ")
            raise ConfigError(field, reason)
        raise HostError(f"lab {record['name']}: {reply.get('error')}")
    print(f"{record['name']}: {reply['result']}")
    return 0


# -- capture ---------------------------------------------------------------------------
def cmd_capture(args) -> int:
    from testbed.lab import capture

    record = state.find(args.lab)
    host, ifname, short = lab_class(record).capture_target(record, args.port)
    if args.seconds is not None and not 0 < args.seconds <= 86400:
        raise ConfigError("--seconds", f"must be 0..86400, got {args.seconds:g}")
    if args.count is not None and args.count < 1:
        raise ConfigError("--count", f"must be 1 or more, got {args.count}")
    need_root("testbed capture")
    pcap = Path(args.out) if args.out else (
        Path(record["out"]) / f"capture-{short}-{time.strftime('%H%M%S')}.pcap")
    helper = capture.start(host, ifname, pcap.resolve(), pid_dir=run_dir(record["run_id"])
                           / "captures", name=f"capture-{short}-{os.getpid()}",
                           snaplen=args.snaplen, count=args.count)
    print(f"capturing on {short} ({ifname}) into {pcap}"
          + (f" for {args.seconds:g} s" if args.seconds else "; Ctrl-C stops"),
          file=sys.stderr, flush=True)
    try:
        helper.wait(args.seconds if args.seconds else 1e9)
    except KeyboardInterrupt:
        pass
    finally:
        helper.stop()
    log = pcap.with_suffix(".log")
    counts = [ln for ln in log.read_text(errors="replace").splitlines()
              if "captured" in ln or "dropped by kernel" in ln] if log.exists() else []
    print(f"{pcap}: {'; '.join(counts) or 'done'}")
    return 0


# -- down ------------------------------------------------------------------------------
def cmd_down(args) -> int:
    from testbed.cluster.servers import clean_servers
    from testbed.host.cleanup import clean

    record = state.find(args.lab, live=False)
    need_root("testbed down")
    t0 = time.monotonic()
    pid = record["owner"]["pid"]
    if record["alive"]:
        os.kill(pid, signal.SIGTERM)
        from testbed.host.procs import wait_for

        if not wait_for(lambda: not state.alive(record), DOWN_TIMEOUT_S, 0.1):
            raise HostError(f"lab {record['name']}: supervisor {pid} still running after "
                            f"{DOWN_TIMEOUT_S} s; 'testbed clean --force' removes it")
    removed, _ = clean(force=True, only={record["run_id"]}, elsewhere=clean_servers)
    for item in removed:
        print(f"removed leftover {item}", file=sys.stderr)
    print(f"lab {record['name']} is down ({time.monotonic() - t0:.1f} s)"
          + (f"; {len(removed)} leftovers of a dead supervisor removed" if removed else ""))
    return 0


# -- parsers ---------------------------------------------------------------------------
def add_parsers(sub) -> None:
    """The lab commands, added to ``testbed``'s subcommands."""
    p = sub.add_parser("up", help="build one variant of a scenario and keep it running")
    p.add_argument("scenario", help="scenario name (scenarios/NAME.yaml) or file")
    p.add_argument("--variant", help="the variant to build (default: the first)")
    p.add_argument("--name", help="the lab's name (default: its run id)")
    p.add_argument("--traffic", action="store_true",
                   help="start the variant's agent chains and training (fabric)")
    p.add_argument("--duration", help="seconds of traffic with --traffic (default: the "
                                      "scenario's duration_s)")
    p.add_argument("--results", default="results", help="results root (default: results)")
    p.add_argument("--servers", help="spread the fabric over these machines too, each "
                                     "[user@]host[:port], comma-separated (overrides the "
                                     "scenario's servers; docs/machines.md)")
    p.add_argument("--monitor", action="store_true", help="also run a Prometheus server "
                   "of the lab's own, on 127.0.0.1, scraping it every second (fabric)")
    p.add_argument("--monitor-port", default="auto", help="where the lab's dashboard and "
                   "metrics listen on 127.0.0.1 (default: auto, a free port)")
    p.add_argument("--fit", action="store_true",
                   help="on a host smaller than the scenario's: scale every rate by the "
                        "largest factor at which it is predicted clean (fabric scenarios)")
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("accept", help="acceptance checks of a running fabric lab: cabling "
                                      "(LLDP against the spec), every link's rate and loss, "
                                      "every equal-cost path's latency and loss; exit 1 if "
                                      "anything is excluded")
    p.add_argument("lab", help="the lab's name (testbed ls)")
    p.add_argument("--checks", default=None, help="only these checks, comma-separated, in "
                   "their order: cabling, links, paths (default: all)")
    p.add_argument("--exclude", action="store_true", help="then take the excluded links "
                   "out of every ECMP set (the controller restarts on the accepted fabric)")
    p.set_defaults(func=cmd_accept)

    p = sub.add_parser("expand", help="cable a rack into a running fabric lab: N more "
                                      "leaves on every plane and the M nodes behind them; "
                                      "acceptance on the rack, then the controller routes "
                                      "it; probes across the old fabric count what is lost; "
                                      "exit 1 if anything of the rack is excluded")
    p.add_argument("lab", help="the lab's name (testbed ls)")
    p.add_argument("--leaves", type=flag(1, 1024, integer=True), required=True,
                   help="leaves added on every plane (a multiple of the fabric's rails)")
    p.add_argument("--nodes", type=flag(1, 4096, integer=True), required=True,
                   help="nodes added: as many per leaf as the fabric's leaves have")
    p.add_argument("--checks", default=None, help="the rack's acceptance checks, "
                   "comma-separated (default: cabling, links, paths, system)")
    p.add_argument("--plant", action="append", metavar="FAULT[:TARGET]", help="a fault "
                   "made in the rack before its acceptance, as a rack may arrive: rate, "
                   "degrade, swap_rails, throttle or link_down, on a link or NIC of the "
                   "rack (default: one drawn with --seed); repeatable")
    p.add_argument("--seed", type=flag(0, 2**63 - 1, integer=True), default=1,
                   help="draws the planted faults' targets (default 1)")
    p.set_defaults(func=cmd_expand)

    p = sub.add_parser("dashboard", help="where a running lab's live dashboard and "
                                         "Prometheus metrics are")
    p.add_argument("lab", help="the lab's name (testbed ls)")
    p.set_defaults(func=cmd_dashboard)

    p = sub.add_parser("ls", help="list the labs on this host")
    p.add_argument("--json", action="store_true", help="every lab's record as JSON")
    p.set_defaults(func=cmd_ls)

    p = sub.add_parser("inspect", help="show a lab: controller, hosts and addresses, "
                                       "switches with datapath ids and ports")
    p.add_argument("lab", help="the lab's name (testbed ls)")
    p.add_argument("--json", action="store_true", help="the lab's record and its topology "
                                                       "spec as JSON")
    p.set_defaults(func=cmd_inspect)

    p = sub.add_parser("exec", help="run a command in a host or router of a lab "
                                    "(no command: a shell)")
    p.add_argument("lab", help="the lab's name (testbed ls)")
    p.add_argument("host", help="short name: n0, nyc, us-east")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- CMD ARGS...")
    p.set_defaults(func=cmd_exec)

    p = sub.add_parser("cli", help="Mininet's CLI on a fabric lab, vtysh on a router")
    p.add_argument("lab", help="the lab's name (testbed ls)")
    p.add_argument("node", nargs="?", help="a backbone router (vtysh)")
    p.add_argument("-c", "--command", help="run one command and leave")
    p.set_defaults(func=cmd_cli)

    p = sub.add_parser("fault", help="apply a fault to a lab now (--list: the kinds)")
    p.add_argument("--list", action="store_true", help="list the fault kinds, their "
                                                       "targets and parameters, and leave")
    p.add_argument("lab", nargs="?", help="the lab's name (testbed ls)")
    p.add_argument("kind", nargs="?", help="link_down, link_up, link_flap, switch_fail, "
                                           "plane_fail, rail_fail, degrade, restore, delay, "
                                           "rate, controller_kill, ... (--list); backbone: "
                                           "cut_link, restore_link, fail_pop, ...")
    p.add_argument("target", nargs="?", help="p0l0-p0s1, n0p0r0, p0s1, p1; nyc-lon-1, ...")
    p.add_argument("--loss", type=flag(0, 1), help="degrade, degrade_link: fraction lost")
    p.add_argument("--period", type=flag(0, 60), help="link_flap: seconds per down/up cycle")
    p.add_argument("--count", type=flag(1, 100, integer=True), help="link_flap: cycles")
    p.add_argument("--delay-ms", type=flag(0, 10_000), help="delay: one-way delay added (netem)")
    p.add_argument("--jitter-ms", type=flag(0, 10_000), help="delay: jitter (netem)")
    p.add_argument("--rate-mbps", type=flag(0, 100_000), help="rate: the link's new rate (HTB); "
                   "throttle: the NIC's rate once its burst is spent")
    p.add_argument("--burst-kb", type=flag(0, 1_000_000), help="throttle: KB the NIC still "
                   "sends at full rate after an idle spell (default 2000)")
    p.set_defaults(func=cmd_fault)

    p = sub.add_parser("capture", help="write a pcap of a port of a lab")
    p.add_argument("lab", help="the lab's name (testbed ls)")
    p.add_argument("port", help="p0l0e3, n0p0r0 (fabric); a link, e.g. nyc-lon-1[:b] "
                                "(backbone, its wire)")
    p.add_argument("-o", "--out", help="pcap file (default: the lab's results folder)")
    p.add_argument("--seconds", type=flag(0, 86400),
                   help="stop after this long (default: Ctrl-C)")
    p.add_argument("--count", type=flag(1, 10**9, integer=True),
                   help="stop after this many frames")
    p.add_argument("--snaplen", type=flag(0, 262_144, integer=True), default=0,
                   help="bytes kept a frame (0: all)")
    p.set_defaults(func=cmd_capture)

    p = sub.add_parser("down", help="tear a lab down (nothing of it is left)")
    p.add_argument("lab", help="the lab's name (testbed ls)")
    p.set_defaults(func=cmd_down)

