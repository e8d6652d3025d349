"""``testbed up``: a lab brought up and described. The input is checked first (scenario,
variant, servers, port, name: one line, exit status 2, nothing created); then the lab's
supervisor (:mod:`testbed.lab.supervisor`) is started in its own session, its progress
relayed, and once it reports the lab ready, what is up is printed (:func:`describe`).
"""

from __future__ import annotations

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
from testbed.host.naming import new_run_id
from testbed.lab import state
from testbed.lab.client import DOWN_TIMEOUT_S, lab_class, name_width, need_root
from testbed.numbers import number

#: the longest a lab may take to come up before ``testbed up`` gives up waiting
UP_TIMEOUT_S = 600


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
    need_root("testbed up")
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


def describe(record: dict) -> str:
    """What ``testbed up`` prints: the lab, its hosts and addresses, example commands."""
    lines = [f"lab {record['name']} is up (run {record['run_id']}, {record['kind']} "
             f"{record['scenario']}/{record['variant']}, {state.size(record)}, "
             f"{record['up_s']:g} s); results and logs: {record['out']}", ""]
    lines.append(f"{lab_class(record).NODES}:")
    width = name_width(record, 12)
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

