"""The process that owns a lab: ``python -m testbed.lab.supervisor REQUEST --ready-fd N``.

``testbed up`` starts it in a session of its own and returns once it reports the lab up
(JSON lines on the ready pipe: ``progress``, then ``ready`` or ``error``). The
supervisor holds what must stay alive and in one place: the ExitStack with every undo
step, the Mininet object (whose node shells hold the host namespaces), the controller
and FRR helpers, and the fault actions bound to them. It records the lab in
``/run/testbed/RUNID/lab.json`` (it is the run folder's owner, so ``testbed clean``
leaves the lab alone while it lives) and serves requests on ``lab.sock`` (JSON, one
line each): ``status``, ``fault``, ``cli`` (Mininet's CLI, then the connection is the
session) and ``down``. SIGTERM or SIGINT (``testbed down``) unwinds the stack: the lab is
removed, the supervisor exits.
"""

from __future__ import annotations

import argparse
import json
import os
import pwd
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
from contextlib import ExitStack
from pathlib import Path

from testbed import experiments
from testbed.core import scenario as scenario_mod
from testbed.errors import ConfigError, Interrupted
from testbed.host.naming import claim, pid_record, run_dir
from testbed.lab import state
from testbed.numbers import flag
from topologies import plugins

ACCEPT_POLL_S = 0.5


def read_line(conn: socket.socket, limit: int = 65536) -> bytes:
    """One request line, byte by byte (what follows it belongs to a CLI session)."""
    line = bytearray()
    while not line.endswith(b"\n") and len(line) < limit:
        byte = conn.recv(1)
        if not byte:
            break
        line += byte
    return bytes(line)


def send(conn: socket.socket, reply: dict) -> None:
    try:
        conn.sendall((json.dumps(reply) + "\n").encode())
    except OSError:
        pass


class Server:
    """The lab's Unix socket: one thread per connection."""

    def __init__(self, path: Path, lab, record: dict, stop: threading.Event) -> None:
        self.path, self.lab, self.record, self.stop_event = path, lab, record, stop
        self.fault_lock = threading.Lock()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        path.unlink(missing_ok=True)
        self.sock.bind(str(path))
        os.chmod(path, 0o600)
        self.sock.listen(8)
        self.sock.settimeout(ACCEPT_POLL_S)
        self.closing = False
        self.thread = threading.Thread(target=self._accept, name="lab-accept", daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.closing:
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def close(self) -> None:
        self.closing = True
        self.thread.join(ACCEPT_POLL_S * 4)
        self.sock.close()
        self.path.unlink(missing_ok=True)

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            try:
                request = json.loads(read_line(conn) or b"{}")
            except (OSError, json.JSONDecodeError):
                send(conn, {"ok": False, "code": 2, "error": "request: not a JSON line"})
                return
            op = request.get("op")
            if op == "status":
                send(conn, {"ok": True, "record": self.record})
            elif op == "down":
                self.stop_event.set()
                send(conn, {"ok": True})
            elif op == "fault":
                send(conn, self._fault(request))
            elif op == "accept" and hasattr(self.lab, "accept"):
                send(conn, self._accept_checks(request.get("checks"),
                                               bool(request.get("exclude"))))
            elif op == "expand" and hasattr(self.lab, "expand"):
                send(conn, self._expand(request))
            elif op == "cli" and getattr(self.lab, "cli", None) is not None:
                self.lab.cli.serve(conn, request.get("banner", ""))
            else:
                send(conn, {"ok": False, "code": 2, "error": f"op: unknown {op!r}"})

    def _accept_checks(self, checks: list[str] | None, exclude: bool) -> dict:
        """The acceptance checks (no fault meanwhile: they would measure it half-way)."""
        with self.fault_lock:
            try:
                result, lines = self.lab.accept(checks, exclude)
            except Exception as exc:  # noqa: BLE001 -- reported to the caller, lab stays up
                print(traceback.format_exc(), flush=True)
                return {"ok": False, "code": 1, "error": f"{type(exc).__name__}: {exc}"}
        print(f"{time.strftime('%H:%M:%S')} accept: "
              f"{'accepted' if result['accepted'] else 'not accepted'}", flush=True)
        return {"ok": True, "result": result, "lines": lines}

    def _expand(self, request: dict) -> dict:
        """A rack cabled in, accepted and routed (no fault meanwhile); the lab's record
        then names its new hosts and switches."""
        with self.fault_lock:
            try:
                result, lines = self.lab.expand(request.get("leaves"), request.get("nodes"),
                                                request.get("checks"),
                                                plant=request.get("plant") or [],
                                                seed=request.get("seed", 1))
            except ConfigError as exc:
                return {"ok": False, "code": 2, "error": str(exc)}
            except Exception as exc:  # noqa: BLE001 -- reported to the caller, lab stays up
                print(traceback.format_exc(), flush=True)
                return {"ok": False, "code": 1, "error": f"{type(exc).__name__}: {exc}"}
            self.record.update({"hosts": self.lab.hosts(), **self.lab.record()})
            state.write(self.record)
        print(f"{time.strftime('%H:%M:%S')} expand: rack "
              f"{'accepted' if result['acceptance']['accepted'] else 'not accepted'}",
              flush=True)
        return {"ok": True, "result": result, "lines": lines}

    def _fault(self, request: dict) -> dict:
        kind = request.get("kind")
        with self.fault_lock:
            try:
                self.lab.check_fault_kind(kind)
                params = {k: v for k, v in request.items()
                          if k not in ("op", "kind", "target") and v is not None}
                result = self.lab.fault(kind, request.get("target"), **params)
            except ConfigError as exc:
                return {"ok": False, "code": 2, "error": str(exc)}
            except Exception as exc:  # noqa: BLE001 -- reported to the caller, lab stays up
                print(traceback.format_exc(), flush=True)
                return {"ok": False, "code": 1, "error": f"{type(exc).__name__}: {exc}"}
        print(f"{time.strftime('%H:%M:%S')} fault: {result}", flush=True)
        return {"ok": True, "result": result}


def lab_class(kind: str):
    """The lab class of experiment kind ``kind`` (:meth:`Experiment.lab_class`)."""
    return experiments.get(kind).lab_class()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="testbed.lab.supervisor")
    parser.add_argument("request", help="the lab request (JSON) that testbed up wrote")
    parser.add_argument("--ready-fd", type=flag(0, 2**31 - 1, integer=True), required=True)
    args = parser.parse_args(argv)
    plugins.allow()  # the lab runs the code its scenario names
    request = json.loads(Path(args.request).read_text())
    ready = os.fdopen(args.ready_fd, "w", buffering=1)

    def report(message: dict) -> None:
        try:
            ready.write(json.dumps(message) + "\n")
        except (OSError, ValueError):  # testbed up went away: the lab lives on
            pass

    def progress(line: str) -> None:
        print(f"{time.strftime('%H:%M:%S')} {line}", flush=True)
        report({"progress": line})

    stop = threading.Event()
    starting = [True]

    def on_signal(signum: int, frame: object) -> None:
        stop.set()
        if starting[0]:
            raise Interrupted(f"stopped by signal {signum} while starting")

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    run_id, name = request["run_id"], request["name"]
    with ExitStack() as stack:
        try:
            claim(run_id)
            stack.callback(shutil.rmtree, run_dir(run_id), True)
            (run_dir(run_id) / state.SUPERVISOR_PID).write_text(pid_record(os.getpid()))
            fitted = request.get("fit") or {}
            sc = scenario_mod.load(request["scenario_file"],
                                   duration_override=request.get("duration_s"),
                                   rate_factor=fitted.get("factor", 1.0))
            variant = next(v for v in sc.variants if v.name == request["variant"])
            out = Path(request["out"])
            lab = lab_class(sc.kind)(sc, variant, run_id=run_id, name=name, out=out,
                                     stack=stack, progress=progress)
            lab.servers = request.get("servers") or []
            lab.start(traffic=request.get("traffic", False), duration_s=sc.duration_s,
                      monitor_port=request.get("monitor_port", "auto"),
                      with_prometheus=request.get("prometheus", False))
            record = {
                "name": name, "run_id": run_id, "kind": sc.kind, "scenario": sc.name,
                "scenario_file": request["scenario_file"], "variant": variant.name,
                "created": request["created"], "up_s": round(time.time() - request["created"], 2),
                "out": str(out), "socket": str(state.socket_path(run_id)),
                "owner": {"pid": os.getpid(), "user": request.get("user")
                          or pwd.getpwuid(os.getuid()).pw_name},
                "hosts": lab.hosts(), **lab.record(), "examples": lab.examples(name),
                **({"fit": fitted} if fitted else {}),
                "state": "up",
            }
            state.write(record)
            servers = [Server(state.socket_path(run_id), lab, record, stop)]
            # first to go: no request meets a half-removed lab
            stack.callback(lambda: servers[-1].close())
            starting[0] = False
            report({"ready": record})
            ready.close()
        except BaseException as exc:  # noqa: BLE001 -- reported, then the stack unwinds
            print(traceback.format_exc(), flush=True)
            report({"error": str(exc), "config": isinstance(exc, ConfigError)})
            ready.close()
            return 1
        while not stop.wait(1.0):
            if not state.lab_file(run_id).exists() or not servers[-1].path.exists():
                # something removed the run folder's files under a live lab (a clean that
                # did not see it alive): record the lab again, so that it stays reachable
                progress(f"{name}: run folder files were removed; writing them again")
                claim(run_id)
                (run_dir(run_id) / state.SUPERVISOR_PID).write_text(pid_record(os.getpid()))
                state.write(record)
                servers[-1].close()
                servers.append(Server(state.socket_path(run_id), lab, record, stop))
        progress(f"{name}: stopping")
        record["state"] = "stopping"
        state.write(record)
    print(f"{time.strftime('%H:%M:%S')} {name}: down", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
