"""The lab commands of ``testbed``: up, ls, exec, cli, fault, capture, down.

Each checks its input first (unknown lab, host, fault kind or port: one line, exit
status 2, nothing created), then acts: ``up`` starts the supervisor
(:mod:`testbed.lab.supervisor`) and returns once the lab is up; ``fault`` and ``cli``
(on a fabric) talk to the supervisor, which holds the live objects; ``exec``, ``cli`` on a
router (vtysh) and ``capture`` enter the namespace themselves.
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from testbed import experiments
from testbed.core import layout
from testbed.errors import ConfigError, HostError, Interrupted
from testbed.host.naming import new_run_id, run_dir
from testbed.lab import state
from testbed.numbers import flag, number

UP_TIMEOUT_S = 600
DOWN_TIMEOUT_S = 120


def _root(what: str) -> None:
    if os.geteuid() != 0:
        raise ConfigError("user", f"{what} needs root (namespaces, Open vSwitch)")


#: the longest acceptance a lab may take before ``testbed accept`` gives up waiting
ACCEPT_TIMEOUT_S = 600


def _request(record: dict, message: dict, timeout: float | None = 120) -> dict:
    """One request to the lab's supervisor, its one-line JSON reply."""
    from testbed.lab.supervisor import read_line

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(record["socket"])
        except OSError as exc:
            raise HostError(f"lab {record['name']}: its supervisor does not answer "
                            f"({exc.strerror})") from None
        sock.sendall((json.dumps(message) + "\n").encode())
        line = read_line(sock)
    if not line:
        raise HostError(f"lab {record['name']}: no reply from its supervisor")
    return json.loads(line)


# -- up --------------------------------------------------------------------------------
def cmd_up(args) -> int:
    from testbed.core import scenario
    from testbed.core.layout import Layout
    from testbed.core.runner import default_out
    from topologies import plugins

    plugins.allow()  # a lab runs the code its scenario names (validate does not)

    duration = None
    if args.duration is not None:
        duration = number(args.duration, "--duration", 1, 3600)
    monitor_port = check_port(args.monitor_port, "--monitor-port")
    path = scenario.path_of(args.scenario).resolve()
    sc = scenario.load(path, duration_override=duration)
    kind = experiments.get(sc.kind)
    kind.lab_class()  # ConfigError when the kind has no lab
    variant = sc.variant(args.variant)
    if args.traffic and not kind.LAB_TRAFFIC:
        raise ConfigError("--traffic", f"a {sc.kind} lab does not start its scenario's "
                                       "workloads (a fabric lab does)")
    servers = [str(s) for s in server_list(args.servers, sc)]
    if servers and not kind.LAB_SERVERS:
        raise ConfigError("--servers", f"a {sc.kind} lab runs on one machine; a fabric lab "
                                       "can be spread over several")
    fitted = None
    if args.fit:
        from testbed.cluster.fit import for_run

        fitted = for_run(path, servers)
        sc = scenario.load(path, duration_override=duration, rate_factor=fitted.factor)
        variant = sc.variant(args.variant)
    if servers and (variant.acceptance.get("enabled") or variant.acceptance.get("plant")):
        raise ConfigError("--servers", "a lab over several machines does not run acceptance "
                                       "checks yet")
    labs = state.all_labs()
    if args.name is not None:
        state.check_name(args.name)
        for record in labs:
            if args.name in (record.get("name"), record.get("run_id")):
                raise ConfigError("--name", f"a lab named {args.name!r} exists "
                                            f"({'live' if record['alive'] else 'dead'})")
    _root("testbed up")
    run_id = new_run_id()
    name = args.name or run_id
    out = Layout(default_out(Path(args.results).resolve(), sc.name,
                             label=f"lab-{name}-")).variant(variant.name)
    out.mkdir(parents=True, exist_ok=True)
    request = {"run_id": run_id, "name": name, "scenario_file": str(path),
               "variant": variant.name, "traffic": args.traffic, "duration_s": duration,
               "monitor_port": monitor_port, "prometheus": args.monitor, "out": str(out),
               "servers": servers,
               **({"fit": fitted.to_dict()} if fitted else {}),
               "created": time.time(),
               "user": os.environ.get("SUDO_USER") or os.environ.get("USER")}
    request_file = out / layout.LAB_REQUEST
    request_file.write_text(json.dumps(request, indent=1))
    read_fd, write_fd = os.pipe()
    log = open(out / layout.SUPERVISOR_LOG, "ab")  # noqa: SIM115 -- handed to the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "testbed.lab.supervisor", str(request_file),
         "--ready-fd", str(write_fd)],
        stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_fd,),
        start_new_session=True)
    os.close(write_fd)
    log.close()
    print(f"testbed: lab {name}: {sc.name} / {variant.name} ({sc.kind}), supervisor "
          f"{proc.pid}, log {out / 'supervisor.log'}", file=sys.stderr)
    try:
        reply = _await_ready(read_fd, proc)
    except (KeyboardInterrupt, Interrupted):
        proc.send_signal(signal.SIGTERM)
        proc.wait(DOWN_TIMEOUT_S)
        raise
    finally:
        os.close(read_fd)
    if "ready" not in reply:
        proc.wait(DOWN_TIMEOUT_S)
        error = reply.get("error") or f"supervisor exited ({proc.returncode}), see its log"
        if reply.get("config"):
            raise ConfigError("SCENARIO", error)
        raise HostError(f"lab {name} did not come up: {error} "
                        f"(log: {out / 'supervisor.log'})")
    print(describe(reply["ready"]))
    return 0


def server_list(flag: str | None, sc) -> list:
    """``--servers`` (a comma-separated list) over the scenario's ``servers``."""
    from testbed.cluster.servers import parse_all

    if flag is not None:
        return parse_all(flag, "--servers")
    return parse_all(list(sc.servers))


def check_port(value: str, field: str) -> int | str:
    """``auto``, or a port on 127.0.0.1 that nobody holds now (so that a taken port is
    refused before anything is created).

    >>> check_port("auto", "--p"), check_port("0", "--p")
    ('auto', 'auto')
    >>> check_port("70000", "--p")
    Traceback (most recent call last):
    ...
    testbed.errors.ConfigError: --p: '70000' must be auto or a port number 1-65535
    """
    if value in ("auto", "0"):
        return "auto"
    if not value.isdigit() or not 0 < int(value) < 65536:
        raise ConfigError(field, f"{value!r} must be auto or a port number 1-65535")
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", int(value)))
        except OSError as exc:
            raise ConfigError(field, f"127.0.0.1:{value}: {exc.strerror} (another lab's?); "
                                     "give another port, or auto") from None
    return int(value)


def _await_ready(fd: int, proc: subprocess.Popen) -> dict:
    """Relay the supervisor's progress; its ``ready`` or ``error`` message."""
    buffer = b""
    deadline = time.monotonic() + UP_TIMEOUT_S
    while time.monotonic() < deadline:
        readable, _, _ = select.select([fd], [], [], 1.0)
        if not readable:
            if proc.poll() is not None:
                return {}
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return {}
        buffer += chunk
        while b"\n" in buffer:
            line, buffer = buffer.split(b"\n", 1)
            message = json.loads(line)
            if "progress" in message:
                print(f"testbed: {message['progress']}", file=sys.stderr, flush=True)
            else:
                return message
    return {"error": f"not up after {UP_TIMEOUT_S} s"}


def _lab(record: dict) -> type:
    """The lab class of the record's kind (:meth:`Experiment.lab_class`): what differs
    between kinds in these commands (what its nodes are called, what ``inspect`` adds,
    what ``cli`` runs, where ``capture`` listens) is the lab's to say."""
    return experiments.get(record["kind"]).lab_class()


def _name_width(record: dict, least: int) -> int:
    """The column of the lab's node names: the longest name (a region's can be long)."""
    return max([least, *map(len, record["hosts"])]) + 2


def describe(record: dict) -> str:
    """What ``testbed up`` prints: the lab, its hosts and addresses, example commands."""
    lines = [f"lab {record['name']} is up (run {record['run_id']}, {record['kind']} "
             f"{record['scenario']}/{record['variant']}, {state.size(record)}, "
             f"{record['up_s']:g} s); results and logs: {record['out']}", ""]
    lines.append(f"{_lab(record).NODES}:")
    width = _name_width(record, 12)
    for short, host in record["hosts"].items():
        where = f"netns {host['netns']}" if not host.get("pid") else f"pid {host['pid']}"
        if host.get("server"):
            where += f" on {host['server']}"
        extra = f" [{host['role']}]" if host.get("role") else ""
        lines.append(f"  {short:<{width}}{', '.join(host['addresses'])}  ({where}){extra}")
    if (record.get("fit") or {}).get("scaled"):
        lines.append(f"rates scaled x{record['fit']['factor']:g} to fit this host "
                     f"({record['fit']['line']})")
    if record.get("switches"):
        lines.append(f"switches: {' '.join(record['switches'])}")
    if record.get("traffic"):
        lines.append(f"traffic: {record['traffic']}")
    if record.get("captures"):
        lines.append(f"captures: {' '.join(record['captures'])}")
    if record.get("monitor"):
        lines.append(f"dashboard: {record['monitor']['url']}  (metrics: "
                     f"{record['monitor']['metrics']})")
    if record.get("prometheus"):
        lines.append(f"prometheus: {record['prometheus']['url']}")
    lines += ["", "try:"] + [f"  {line}" for line in record.get("examples", [])]
    return "\n".join(lines)


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
    lab = _lab(record)
    lines.append(f"{lab.NODES}:")
    width = _name_width(record, 8)
    for short, host in record["hosts"].items():
        extra = f" [{host['role']}]" if host.get("role") else ""
        extra += f" (on {host['server']})" if host.get("server") else ""
        lines.append(f"  {short:<{width}}{', '.join(host['addresses'])}{extra}")
    return lines + lab.inspect_lines(record)


def cmd_inspect(args) -> int:
    record = state.find(args.lab, live=False)
    if args.json:
        print(json.dumps({**record, **_lab(record).inspect_json(record)}, indent=1))
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
    reply = _request(record, {"op": "accept", "checks": checks, "exclude": args.exclude},
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
    reply = _request(record, {"op": "expand", "leaves": args.leaves, "nodes": args.nodes,
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
    _root("testbed exec")
    argv = _command(args.command) or ["bash", "-i"]
    env = {**os.environ, "PS1": f"{record['name']}:{args.host}# "}
    try:
        return subprocess.run(host.argv(argv), env=env).returncode
    except KeyboardInterrupt:
        return 130


# -- cli -------------------------------------------------------------------------------
def cmd_cli(args) -> int:
    record = state.find(args.lab)
    argv = _lab(record).cli_argv(record, args.node, args.command)  # checks the node
    _root("testbed cli")
    if argv is None:  # the lab's supervisor serves it
        return attach_cli(record, args.command)
    return subprocess.run(argv).returncode


def attach_cli(record: dict, command: str | None = None) -> int:
    """Relay this terminal to the supervisor's Mininet CLI; without a terminal (a pipe, or
    ``command``) run the lines one after the other, each once the prompt is back (a line
    typed ahead would otherwise reach the running command as its input, as in ``mn``)."""
    prompt = f"mininet:{record['name']}> "
    interactive = command is None and sys.stdin.isatty()
    banner = (f"Mininet CLI of lab {record['name']} (nodes also answer to short names: "
              f"{', '.join(list(record['hosts'])[:4])}, ...); 'help', 'exit' or Ctrl-D "
              "to leave (the lab stays up)\n")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(record["socket"])
    except OSError as exc:
        raise HostError(f"lab {record['name']}: its supervisor does not answer "
                        f"({exc.strerror})") from None
    sock.sendall((json.dumps({"op": "cli", "banner": banner if interactive else ""}) + "\n")
                 .encode())
    try:
        if interactive:
            return _relay(sock, prompt, completions(record))
        lines = [command] if command is not None else sys.stdin.read().splitlines()
        return _script(sock, [ln for ln in lines if ln.strip()] + ["exit"], prompt)
    finally:
        sock.close()


def completions(record: dict) -> list[str]:
    """What Tab completes at the CLI's prompt: Mininet's commands and the lab's nodes by
    their short names."""
    from mininet.cli import CLI

    commands = [name[3:] for name in dir(CLI) if name.startswith("do_")]
    return sorted(set(commands) | set(record.get("hosts", {})) | set(record.get("switches", [])))


def completer(words: list[str]):
    """A readline completer over ``words`` (state-indexed, as readline asks)."""
    def complete(text: str, index: int) -> str | None:
        matches = [w + " " for w in words if w.startswith(text)]
        return matches[index] if index < len(matches) else None
    return complete


def _relay(sock: socket.socket, prompt: str, words: list[str]) -> int:
    """An interactive session: lines are read here with readline (Tab completes commands
    and node names, arrows recall earlier lines), output is relayed until the prompt is
    back; while a command runs, typed keys reach it and Ctrl-C interrupts it."""
    import readline

    readline.set_completer(completer(words))
    readline.set_completer_delims(" \t")
    readline.parse_and_bind("tab: complete")
    if not _output_until_prompt(sock, prompt):
        return 0
    while True:
        try:
            line = input(prompt)
        except KeyboardInterrupt:  # at the prompt: a fresh line, as in mn
            sys.stdout.write("\n")
            continue
        except EOFError:
            sys.stdout.write("\n")
            line = "exit"
        _send(sock, (line + "\n").encode())
        if not _output_until_prompt(sock, prompt):
            return 0


def _output_until_prompt(sock: socket.socket, prompt: str, keys: bool = True) -> bool:
    """Write what the session prints until its prompt (not printed: ``input`` does that);
    False when the session has ended. A running command gets Ctrl-C and, with ``keys``,
    what is typed."""
    held, sources = "", [sock] + ([sys.stdin] if keys else [])
    old = signal.signal(signal.SIGINT, lambda *_: _send(sock, b"\x03"))
    try:
        while True:
            ready, _, _ = select.select(sources, [], [])
            if sys.stdin in ready:
                data = os.read(sys.stdin.fileno(), 4096)
                if data:
                    _send(sock, data)
                else:
                    sources.remove(sys.stdin)
            if sock not in ready:
                continue
            data = sock.recv(65536)
            if not data:
                sys.stdout.write(held)
                sys.stdout.flush()
                return False
            held += data.decode(errors="replace")
            if held.endswith(prompt):
                sys.stdout.write(held[:-len(prompt)])
                sys.stdout.flush()
                return True
            keep = next((k for k in range(min(len(prompt), len(held)), 0, -1)
                         if held.endswith(prompt[:k])), 0)  # maybe the prompt's beginning
            sys.stdout.write(held[:len(held) - keep])
            sys.stdout.flush()
            held = held[len(held) - keep:]
    finally:
        signal.signal(signal.SIGINT, old)


def _script(sock: socket.socket, lines: list[str], prompt: str) -> int:
    if not _output_until_prompt(sock, prompt, keys=False):
        return 1
    for line in lines:
        _send(sock, (line + "\n").encode())
        if not _output_until_prompt(sock, prompt, keys=False):
            break
    return 0


def _send(sock: socket.socket, data: bytes) -> None:
    try:
        sock.sendall(data)
    except OSError:
        pass


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
    reply = _request(record, {"op": "fault", "kind": args.kind, "target": args.target,
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
    host, ifname, short = _lab(record).capture_target(record, args.port)
    if args.seconds is not None and not 0 < args.seconds <= 86400:
        raise ConfigError("--seconds", f"must be 0..86400, got {args.seconds:g}")
    if args.count is not None and args.count < 1:
        raise ConfigError("--count", f"must be 1 or more, got {args.count}")
    _root("testbed capture")
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
    from testbed.host.cleanup import clean

    record = state.find(args.lab, live=False)
    _root("testbed down")
    t0 = time.monotonic()
    pid = record["owner"]["pid"]
    if record["alive"]:
        os.kill(pid, signal.SIGTERM)
        from testbed.host.procs import wait_for

        if not wait_for(lambda: not state.alive(record), DOWN_TIMEOUT_S, 0.1):
            raise HostError(f"lab {record['name']}: supervisor {pid} still running after "
                            f"{DOWN_TIMEOUT_S} s; 'testbed clean --force' removes it")
    removed, _ = clean(force=True, only={record["run_id"]})
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

