"""Replacement: a node the health loop declares degraded is drained, and its agent
services and training ranks move to a spare node, while the run goes on.

::

    replacement:
      enabled: true
      spares: [2, 6]     # node indices, in order: a degraded node's roles go to the
                         # first one not in use

Watched: every node with a role in the run (the chain driver, the services, the
training ranks), by :class:`testbed.operations.health.HealthLoop`. When one is declared:

1. *drain*: the driver holds the node's services (SIGHUP with the service directory:
   their next hops wait, and count the wait);
2. *move*: each service starts on the spare (same port, the spare's address on every
   plane) and listens;
3. *release*: the directory names the spare and the driver's held hops go there.

The service left on the degraded node gets no new hop (those in flight finish there);
the time to replace is from the declaration to the release. A training rank moves the
way a collective job does: the job is stopped and started again on the rank list with
the spare in the node's place, numbering its iterations on from the one after the last
any rank wrote (a checkpoint restart: the iteration in flight is lost); its time is
from the declaration to the new common start. The chain driver is not moved (it is the
client; its node is declared and recorded). With no spare left the node is declared and
stays in service; a spare that took over is not watched in that run. Moves run one at
a time; when the run ends, a move under way starts nothing more, is waited for, and what
the moves started is stopped after it. A service whose start fails is released to its
old address.

The record (``replacement.json``, and the variant's ``replacement`` entry): the rule's
figures, every window's probes, each declaration with what moved where and how long it
took; the run adds how many chains started after each declaration and how many of them
failed (:func:`chains_after`).
"""

from __future__ import annotations

import copy
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack, suppress
from pathlib import Path

from testbed.core import layout
from testbed.host.files import read_jsonl, write_json
from testbed.operations import health
from testbed.workloads.chains import start_service
from testbed.workloads.generators import agent_plan, roles_by_node, service_on, start_ranks
from topologies.spec import FabricSpec, short


class Replacer:
    """The health loop of one run and the moves it triggers."""

    def __init__(self, fabric, spec: FabricSpec, *, agents: dict, training: dict,
                 work, spares: Sequence[int], out: Path, pid_dir: Path, stack: ExitStack,
                 end_at: float, seed: int,
                 progress: Callable[[str], None] = lambda _: None) -> None:
        """``work``: the run's workloads (:class:`testbed.workloads.generators.Workload`:
        the driver, the training ranks); ``end_at``: when the
        run's traffic ends (a restarted job runs until then)."""
        self.fabric, self.spec = fabric, spec
        self.work = work
        # role -> node index, as it is now
        self.services = dict(agents["services"]) if agents.get("enabled") else {}
        self.driver = work.driver
        self.training = copy.deepcopy(training) if training.get("enabled") else None
        self.end_at, self.seed = end_at, seed
        self.out, self.pid_dir, self.stack = out, pid_dir, stack
        #: what the moves start: closed after every mover has ended (a mover never adds
        #: to a stack that is being unwound)
        self.own = ExitStack()
        self.progress = progress
        self.roles = roles = roles_by_node(agents, training)
        self.free = [s for s in spares if s not in roles]
        self.events: list[dict] = []
        self._lock = threading.Lock()  # the directory, the services' places, the events
        self._move_lock = threading.Lock()  # one move at a time
        self._held: set[str] = set()
        self.cancel = threading.Event()  # the run is ending: no move starts anything more
        self._movers: list[threading.Thread] = []
        watched = [short(spec, spec.hosts[i].name) for i in sorted(roles)]
        self.nics = health.nics(spec, watched, fabric.host_pid)
        self.rule = health.Rule(health.latency_max_ms(spec))
        self.reflect = health.Reflect(self.nics, fabric.ofctl_target)
        pids = {short(spec, spec.hosts[i].name): fabric.host_pid(spec.hosts[i].name)
                for i in sorted(roles)}
        self.loop = health.HealthLoop(self.nics, pids, self.rule, self._declared,
                                      loop_id=os.getpid())

    def _node_index(self, node: str) -> int:
        return next(i for i, h in enumerate(self.spec.hosts) if short(self.spec, h.name) == node)

    def start(self) -> None:
        self.stack.callback(self.reflect.remove)
        self.reflect.install()
        self.stack.callback(self.close)
        self.loop.start()

    def close(self) -> None:
        """Stop the loop and the moves, then what the moves started."""
        self.stop()
        self.own.close()

    def _declared(self, record: dict) -> None:
        node = self._node_index(record["node"])
        roles = self.roles.get(node, [])
        moving = [r for r in roles if r in self.services or r.startswith("rank")]
        event = {**record, "roles": roles, "moved": {}, "to": None, "replace_ms": None,
                 "action": "declared"}
        self.progress(f"node {record['node']} degraded at {record['declared_s']:.1f} s: "
                      f"{record['reason']}")
        with self._lock:
            self.events.append(event)
            spare = self.free.pop(0) if moving and self.free else None
        if not moving:
            event["action"] = "declared; no service or rank on it to move (the driver)"
            return
        if spare is None:
            event["action"] = "declared; no spare left (replacement.spares)"
            return
        event["to"] = short(self.spec, self.spec.hosts[spare].name)
        event["action"] = "moving"
        mover = threading.Thread(target=self._move, args=(event, node, moving, spare),
                                 name=f"replace-{record['node']}", daemon=True)
        self._movers.append(mover)
        mover.start()

    def _directory(self) -> None:
        """Where every service is now and which are held, for the driver (SIGHUP)."""
        write_json(self.out / layout.SERVICE_DIRECTORY,
                   {"services": agent_plan(self.spec, self.services)["services"],
                    "held": sorted(self._held)})
        if self.driver is not None and self.driver.alive():
            with suppress(ProcessLookupError):  # it ended meanwhile
                self.driver.proc.send_signal(signal.SIGHUP)

    def _move(self, event: dict, node: int, moving: list[str], spare: int) -> None:
        """One move at a time (a second declaration waits for the first move)."""
        with self._move_lock:
            done: list[str] = []
            try:
                services = [r for r in moving if r in self.services]
                if services:
                    done += self._move_services(event, services, spare)
                if any(r.startswith("rank") for r in moving):
                    done += self._restart_training(event, node, spare)
            except Exception as exc:  # noqa: BLE001 -- the run goes on; the record says why
                event["error"] = f"{type(exc).__name__}: {exc}"
            event["action"] = (f"{', '.join(done)} moved to {event['to']}" if done
                               else f"nothing moved: {event.get('error', 'the run ended')}")

    def _move_services(self, event: dict, moving: list[str], spare: int) -> list[str]:
        """Hold, start on the spare, release (also when the start fails: the old
        addresses then stand); the roles moved."""
        if self.cancel.is_set() or time.time() > self.end_at - 1.0:
            return []
        t0 = event["declared_at"]
        with self._lock:
            self._held |= set(moving)
            self._directory()
        event["held_at"] = round(time.time() - t0, 4)
        started = []
        try:
            where = service_on(self.fabric, spare)
            for role in moving:
                if self.cancel.is_set():
                    break
                start_service(role, where, out=self.out, pid_dir=self.pid_dir,
                              stack=self.own, tag=event["to"])
                started.append(role)
        finally:
            with self._lock:
                if started == moving:
                    for role in moving:
                        self.services[role] = spare
                self._held -= set(moving)
                self._directory()
        if started != moving:
            return []
        event["moved"].update(dict.fromkeys(moving, event["to"]))
        event["replace_ms"] = round((time.time() - t0) * 1e3, 1)
        event["released_at"] = time.time()
        self.progress(f"node {event['node']}: {', '.join(moving)} moved to {event['to']} "
                      f"in {event['replace_ms']:.0f} ms")
        return ["services"]

    def _restart_training(self, event: dict, node: int, spare: int) -> list[str]:
        """The training job stopped, and started again on the rank list with the spare
        in the node's place, numbering its iterations on after the last one any rank
        wrote (a checkpoint restart: an iteration not every rank finished is lost)."""
        t0 = event["declared_at"]
        training = self.training
        if training is None or self.cancel.is_set() or time.time() > self.end_at - 1.0:
            event["training"] = "not restarted: the run was ending"
            return []
        self.work.restarting = True
        try:
            for proc in self.work.ranks or []:
                proc.stop(0.2)  # the job is killed; its last complete iterations stand
            last = -1
            for r in range(len(training["ranks"])):
                path = self.work.rank_file(r)
                if path.exists():
                    _end_line(path)  # a rank killed mid-write left half a line
                    last = max([last, *(rec["iteration"] for rec in read_jsonl(path))])
            training["ranks"] = [spare if n == node else n for n in training["ranks"]]
            ranks, start_at = start_ranks(
                self.fabric, training, out=self.out, pid_dir=self.pid_dir,
                duration_s=max(1.0, self.end_at - time.time()), seed=self.seed,
                stack=self.own, first_iteration=last + 1, cancel=self.cancel)
            self.work.ranks = ranks
        finally:
            self.work.restarting = False
        event["moved"].update({f"rank{r}": event["to"]
                               for r, n in enumerate(training["ranks"]) if n == spare})
        event["training_restart_ms"] = round((start_at - t0) * 1e3, 1)
        event["training_from_iteration"] = last + 1
        if event["replace_ms"] is None:
            event["replace_ms"] = event["training_restart_ms"]
        self.progress(f"node {event['node']}: training again with its rank on "
                      f"{event['to']} from iteration {last + 1}, "
                      f"{event['training_restart_ms']:.0f} ms after the declaration")
        return ["training ranks"]

    def stop(self) -> None:
        """The loop stopped, a move under way told to stop, every mover waited for."""
        self.cancel.set()
        if self.loop.is_alive():
            self.loop.stop()
        for mover in self._movers:
            mover.join()

    def record(self) -> dict:
        """What was watched, the rule, the windows and every declaration."""
        self.stop()
        data = {"watched": sorted({n.node for n in self.nics}),
                "nics": [n.name for n in self.nics],
                "rule": {"window_s": health.WINDOW_S, "probe_hz": health.PROBE_HZ,
                         "loss_max": self.rule.loss_max,
                         "latency_max_ms": self.rule.latency_max_ms,
                         "confirm": self.rule.confirm},
                "events": self.events, "error": self.loop.error,
                "windows": self.loop.windows}
        write_json(self.out / layout.REPLACEMENT, data)
        return data


def _end_line(path: Path) -> None:
    """End a file that a killed writer left in the middle of a line."""
    with open(path, "rb+") as f:
        f.seek(0, os.SEEK_END)
        if f.tell():
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")


def chains_after(events: list[dict], chains_file: Path) -> None:
    """Add to each declaration the chains that started after it and how many failed."""
    chains = read_jsonl(chains_file) if chains_file.exists() else []
    for e in events:
        after = [c for c in chains if c["start"] >= e["declared_at"]]
        e["chains_after"] = len(after)
        e["chains_failed_after"] = sum(1 for c in after if not c["ok"])
        e["failed_after"] = sorted({c["error"] for c in after if not c["ok"]})
