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
any rank began (a checkpoint restart: the iteration in flight is lost); its time is
from the declaration to the new common start. The chain driver is not moved (it is the
client; its node is declared and recorded). With no spare left the node is declared and
stays in service; a spare that took over is not watched in that run.

The record (``replacement.json``, and the variant's ``replacement`` entry): the rule's
figures, every window's probes, each declaration with what moved where and how long it
took; the run adds how many chains started after each declaration and how many of them
failed (:func:`chains_after`).
"""

from __future__ import annotations

import copy
import json
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from pathlib import Path

from pydantic import Field

from testbed.core import layout
from testbed.errors import BringUpError
from testbed.faults.fabric import short
from testbed.host.files import read_jsonl, write_json
from testbed.operations import health
from testbed.workloads.chains import Service, start_service
from testbed.workloads.generators import start_ranks
from topologies.params import Section
from topologies.spec import FabricSpec


class Replacement(Section):
    """Node health during the run; degraded nodes' services move to spares
    (:mod:`testbed.operations.replace`)."""

    enabled: bool = Field(False, description="watch the nodes' health during the run and "
                                             "replace a degraded one")
    spares: list[int] = Field(default_factory=list, description="node indices that take "
                                                                "over a degraded node's "
                                                                "services, in order")


class Replacer:
    """The health loop of one run and the moves it triggers."""

    def __init__(self, fabric, spec: FabricSpec, *, agents: dict, training: dict,
                 work, spares: Sequence[int], out: Path, pid_dir: Path, stack: ExitStack,
                 end_at: float, seed: int,
                 progress: Callable[[str], None] = lambda _: None) -> None:
        """``work``: the run's workloads (:class:`testbed.workloads.generators.Workload`:
        where the services run, the driver, the training ranks); ``end_at``: when the
        run's traffic ends (a restarted job runs until then)."""
        self.fabric, self.spec = fabric, spec
        self.work = work
        services = work.services
        self.services = dict(services)  # role -> node index, as it is now
        self.driver = work.driver
        self.training = copy.deepcopy(training) if training.get("enabled") else None
        self.end_at, self.seed = end_at, seed
        self.out, self.pid_dir, self.stack = out, pid_dir, stack
        self.progress = progress
        roles: dict[int, list[str]] = {}
        if agents.get("enabled"):
            roles.setdefault(agents["driver"], []).append("driver")
            for role, node in services.items():
                roles.setdefault(node, []).append(role)
        if training.get("enabled"):
            for rank, node in enumerate(training["ranks"]):
                roles.setdefault(node, []).append(f"rank{rank}")
        self.roles = roles
        self.free = [s for s in spares if s not in roles]
        self.events: list[dict] = []
        self._lock = threading.Lock()
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
        self.reflect.install()
        self.stack.callback(self.reflect.remove)
        self.stack.callback(self.stop)
        self.loop.start()

    def _declared(self, record: dict) -> None:
        node = self._node_index(record["node"])
        roles = self.roles.get(node, [])
        moving = [r for r in roles if r in self.services or r.startswith("rank")]
        event = {**record, "roles": roles, "moved": {}, "to": None, "replace_ms": None}
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
        mover = threading.Thread(target=self._move, args=(event, node, moving, spare),
                                 name=f"replace-{record['node']}", daemon=True)
        self._movers.append(mover)
        mover.start()

    def _directory(self, held: Sequence[str]) -> None:
        plan = json.loads((self.out / layout.AGENT_PLAN).read_text())
        services = plan["services"]
        for role, node in self.services.items():
            services[role] = [[a, p] for a, p in self._addresses(role, node)]
        path = self.out / layout.SERVICE_DIRECTORY
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"services": services, "held": list(held)}))
        tmp.replace(path)
        if self.driver is not None and self.driver.alive():
            os.kill(self.driver.pid, signal.SIGHUP)

    def _addresses(self, role: str, node: int) -> list[tuple[str, int]]:
        from testbed.workloads.chains import SERVICE_PORT, SERVICES
        host = self.spec.hosts[node]
        port = SERVICE_PORT + SERVICES.index(role)
        return [(host.interface(p, 0).ip, port) for p in range(self.spec.planes)]

    def _move(self, event: dict, node: int, moving: list[str], spare: int) -> None:
        services = [r for r in moving if r in self.services]
        ranks = [r for r in moving if r.startswith("rank")]
        done = []
        if services:
            done += self._move_services(event, services, spare)
        if ranks:
            done += self._restart_training(event, node, spare)
        event["action"] = (f"{', '.join(done)} moved to {event['to']}" if done
                           else event.get("action", "nothing moved"))

    def _move_services(self, event: dict, moving: list[str], spare: int) -> list[str]:
        """Hold, start on the spare, release; the roles moved."""
        t0 = event["declared_at"]
        try:
            with self._lock:
                self._directory(held=moving)
            event["held_at"] = round(time.time() - t0, 4)
            host = self.spec.hosts[spare]
            where = Service(self.fabric.host(host.name),
                            [host.interface(p, 0).ip for p in range(self.spec.planes)])
            for role in moving:
                start_service(role, where, out=self.out, pid_dir=self.pid_dir,
                              stack=self.stack, tag=event["to"])
                event["moved"][role] = event["to"]
            with self._lock:
                for role in moving:
                    self.services[role] = spare
                self._directory(held=())
            event["replace_ms"] = round((time.time() - t0) * 1e3, 1)
            event["released_at"] = time.time()
            self.progress(f"node {event['node']}: {', '.join(moving)} moved to {event['to']} "
                          f"in {event['replace_ms']:.0f} ms")
            return ["services"]
        except (BringUpError, OSError) as exc:
            event["action"] = f"services not moved: {exc}"
            with self._lock:
                self._directory(held=())  # the old addresses again: hops go on
            return []

    def _restart_training(self, event: dict, node: int, spare: int) -> list[str]:
        """The training job stopped, and started again on the rank list with the spare
        in the node's place, from the iteration after the last one any rank began (a
        checkpoint restart: the iteration in flight is lost)."""
        t0 = event["declared_at"]
        training = self.training
        if training is None or time.time() > self.end_at - 1.0:
            return []
        for proc in self.work.ranks or []:
            proc.stop(0.2)  # the job is killed; its last complete iterations stand
        last = -1
        for r in range(len(training["ranks"])):
            path = self.work.rank_file(r)
            if path.exists():
                last = max([last, *(rec["iteration"] for rec in read_jsonl(path))])
        training["ranks"] = [spare if n == node else n for n in training["ranks"]]
        moved = {f"rank{r}": event["to"] for r, n in enumerate(training["ranks"]) if n == spare}
        try:
            ranks, start_at = start_ranks(
                self.fabric, training, out=self.out, pid_dir=self.pid_dir,
                duration_s=max(1.0, self.end_at - time.time()), seed=self.seed,
                stack=self.stack, first_iteration=last + 1)
        except (BringUpError, OSError) as exc:
            event["training"] = f"not restarted: {exc}"
            return []
        self.work.ranks = ranks
        event["moved"].update(moved)
        event["training_restart_ms"] = round((start_at - t0) * 1e3, 1)
        event["training_from_iteration"] = last + 1
        if event["replace_ms"] is None:
            event["replace_ms"] = event["training_restart_ms"]
        self.progress(f"node {event['node']}: training restarted with "
                      f"{', '.join(moved)} on {event['to']} from iteration {last + 1}, "
                      f"{event['training_restart_ms']:.0f} ms after the declaration")
        return ["training ranks"]

    def stop(self) -> None:
        if self.loop.is_alive():
            self.loop.stop()
        for mover in self._movers:
            mover.join(timeout=20)

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


def chains_after(events: list[dict], chains_file: Path) -> None:
    """Add to each declaration the chains that started after it and how many failed."""
    chains = read_jsonl(chains_file) if chains_file.exists() else []
    for e in events:
        after = [c for c in chains if c["start"] >= e["declared_at"]]
        e["chains_after"] = len(after)
        e["chains_failed_after"] = sum(1 for c in after if not c["ok"])
        e["failed_after"] = sorted({c["error"] for c in after if not c["ok"]})
