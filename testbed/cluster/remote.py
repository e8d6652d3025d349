"""What the lab runs on another machine of a lab over several, through its ssh
connection (:mod:`testbed.cluster.servers`), as root:

* ``check``: can this machine hold its part? One JSON line: the code's digest, the
  tunnels its kernel can make (gretap, vxlan), the interface and MTU of its route to
  each peer, and the problems found (not root, no Mininet, no Open vSwitch, no tunnel,
  no route). Creates nothing that outlives it.
* ``part``: build this machine's part of the fabric and hold it. Reads one JSON request
  on stdin (the spec, what runs here, the tunnels' ends, the controller's forwarded
  port), builds it with the lab's own bring-up (:class:`testbed.fabric.net.Fabric`),
  answers ``{"ready": ...}`` with its hosts' pids, then serves requests (``queue_stats``,
  the mirror's files, ``watch`` and ``unwatch``, ``stop``) one JSON line each. Over a
  run's measured window the lab's fidelity monitor (:class:`testbed.core.fidelity.Monitor`)
  samples this machine once a second as it samples the lab's own: ``watch`` starts it,
  ``unwatch`` stops it and answers its samples (the lab's machine judges them); a lab
  that only stands (``testbed up``) is not sampled. End of input (the lab's machine went
  away, or its ssh did) tears the part down as ``stop`` does; so do SIGTERM, SIGINT and
  SIGHUP. Every name it creates is registered in the run's folder here, so ``testbed
  clean`` on this machine removes what a killed part left.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import sys
import traceback
from pathlib import Path

from testbed.errors import Interrupted, TestbedError


def check(run_id: str, peers: list[str]) -> dict:
    from testbed.cluster.servers import code_digest
    from testbed.host.hosts import RootHost
    from testbed.host.naming import run_prefix

    problems = []
    if os.geteuid() != 0:
        problems.append("the lab runs as root there (or through passwordless sudo)")
    host = RootHost()
    if shutil.which("mnexec") is None:
        problems.append("Mininet is not installed (make setup)")
    done = host.run(["ovs-vsctl", "--timeout=5", "show"])
    if done.returncode:
        problems.append(f"Open vSwitch does not answer (make setup starts it): "
                        f"{done.stderr.strip()[-120:]}")
    tunnels = []
    probe = f"{run_prefix(run_id)}chk"
    for kind, words in (("gretap", ["local", "127.0.0.1", "remote", "127.0.0.2", "key", "1"]),
                        ("vxlan", ["id", "1", "local", "127.0.0.1", "dstport", "4789"])):
        done = host.run(["ip", "link", "add", "name", probe, "type", kind, *words])
        if done.returncode == 0:
            host.run(["ip", "link", "del", probe])
            tunnels.append(kind)
    if not tunnels:
        problems.append("the kernel makes neither gretap nor vxlan tunnels (the ip_gre or "
                        "vxlan module)")
    routes = {}
    for peer in peers:
        route = host.run(["ip", "-j", "route", "get", peer])
        try:
            dev = json.loads(route.stdout)[0]["dev"]
            routes[peer] = [dev, int(Path(f"/sys/class/net/{dev}/mtu").read_text())]
        except (ValueError, IndexError, KeyError, OSError):
            problems.append(f"no route to {peer}: {route.stderr.strip()[-120:]}")
    return {"digest": code_digest(), "problems": problems, "tunnels": tunnels,
            "routes": routes}


def _prepare(message: dict) -> bool:
    """The folders of the files a helper started here names (the run's results folder
    has the same path on every machine)."""
    for folder in message["dirs"]:
        Path(folder).mkdir(parents=True, exist_ok=True)
    return True


#: bytes of file contents one ``read`` answer carries at most (the rest comes with the
#: next; the lab's machine refuses an answer that carries more)
READ_MAX_BYTES = 16 << 20


def _read(message: dict) -> dict:
    """What each file has beyond ``offset`` (all of it when it shrank: written anew; an
    offset of None: not seen yet, so an empty file is news too), for the files that
    exist: ``{path: [size held after it, start, base64 bytes]}``, at most
    :data:`READ_MAX_BYTES` of them in one answer."""
    out = {}
    budget = READ_MAX_BYTES
    for path, offset in message["paths"].items():
        if budget <= 0:
            break  # the next answer carries the rest
        try:
            with open(path, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                start = offset if offset is not None and size >= offset else 0
                if offset is not None and size == start:
                    continue
                f.seek(start)
                data = f.read(min(size - start, budget))
        except FileNotFoundError:
            continue
        budget -= len(data)
        out[path] = [start + len(data), start, base64.b64encode(data).decode()]
    return out


def _write(message: dict) -> bool:
    """A file written here as the lab's machine has it (a helper here reads it)."""
    path = Path(message["path"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".mirror")
    tmp.write_bytes(base64.b64decode(message["data"]))
    tmp.replace(path)
    return True


#: what a part answers besides its queues and its monitor: the mirror of a helper's files
#: (:class:`testbed.cluster.mirror.Mirror`)
REQUESTS = {"prepare": _prepare, "read": _read, "write": _write}


def part(request: dict, requests, answers) -> int:
    """Build and hold one machine's part (see the module's text); ``requests`` and
    ``answers`` are the session's input and output (nothing else may use them)."""
    from testbed.core.fidelity import Monitor
    from testbed.fabric.net import Fabric, Tunnel
    from testbed.fabric.qos import Qos, classes_of
    from testbed.fabric.switchd import SwitchSettings
    from testbed.host.capabilities import probe
    from testbed.host.naming import claim, run_dir
    from topologies.spec import FabricSpec

    def say(message: dict) -> None:
        try:
            answers.write(json.dumps(message) + "\n")
            answers.flush()
        except (BrokenPipeError, OSError):  # the lab's machine went away: tear down still
            pass

    def on_signal(signum: int, _frame: object) -> None:
        raise Interrupted(f"stopped by signal {signum}")

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, on_signal)
    run_id = request["run_id"]
    # the run's folder is the part's own on its machine; a part on the lab's own machine
    # (the test of a fabric in two parts on one machine) shares the lab's
    own = request.get("own_folder", True)
    if own:
        claim(run_id)
    fabric = monitor = None
    try:
        spec = FabricSpec.from_dict(request["spec"])
        fabric = Fabric(
            spec, probe(run_id), run_id=run_id, controller_port=request["controller_port"],
            red=request.get("red"),
            classes=classes_of(Qos.model_validate(request.get("qos") or {})),
            switches=SwitchSettings.model_validate(request.get("switches") or {}),
            log_dir=run_dir(run_id), here=request["here"],
            tunnels=[Tunnel(**t) for t in request["tunnels"]])
        fabric.start(None, check=False)
        say({"ready": {"hosts": {name: fabric.host_pid(name) for name in request["here"]
                                 if not spec.is_switch(name)},
                       "times": fabric.times.__dict__}})
        for line in requests:
            message = json.loads(line)
            op = message.get("op")
            if op == "queue_stats":
                say({"queue_stats": fabric.queue_stats()})
            elif op == "watch":
                # this machine's samples, beside the lab's machine's (a part that shares
                # the lab's machine samples it a second time: the two-part test)
                if monitor is None:
                    monitor = Monitor(run_dir(run_id) / f"fidelity-{os.getpid()}.jsonl")
                    monitor.watch()  # before its baseline: every sample is in the window
                    monitor.start()
                say({"watch": True})
            elif op == "unwatch":
                samples = []
                if monitor is not None:
                    monitor.stop()
                    samples, monitor = monitor.samples, None
                say({"unwatch": samples})
            elif op in REQUESTS:
                say({op: REQUESTS[op](message)})
            elif op == "stop":
                break
            else:
                say({"error": f"unknown request {op!r}"})
    except (TestbedError, OSError, KeyError, ValueError) as exc:
        traceback.print_exc()
        say({"error": str(exc) or type(exc).__name__})
        return 1
    finally:
        try:
            if monitor is not None:
                try:
                    monitor.stop()
                except Exception:  # its sampler's failure must not keep the part standing
                    traceback.print_exc()
            if fabric is not None:
                say({"stopped": round(fabric.stop(), 2)})
        finally:
            if own:
                shutil.rmtree(run_dir(run_id), ignore_errors=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.cluster.remote")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("check")
    p.add_argument("--run-id", required=True)
    p.add_argument("--peer", action="append", default=[])
    sub.add_parser("part")
    args = parser.parse_args(argv)
    if args.command == "check":
        print(json.dumps(check(args.run_id, args.peer)))
        return 0
    # the session's input and output are the part's requests and answers alone: what the
    # bring-up and its children print goes to the log (stderr), and none reads the input
    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w")
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(2, 1)
    line = requests.readline()
    if not line:
        return 1
    return part(json.loads(line), requests, answers)


if __name__ == "__main__":
    sys.exit(main())
