"""Faults on a schedule: timed actions run in order, each with its exact timestamps.

Generic on purpose (the backbone and the fabric resilience work share it): the
caller supplies the actions as callables keyed by name, the schedule only keeps
time. Times are wall-clock (``time.time()``) so they compare with timestamps that
generators in other processes write.

>>> log = []
>>> sched = Schedule([Fault(0.0, "cut", "x"), Fault(0.01, "restore", "x")],
...                  {"cut": log.append, "restore": lambda t: log.append("+" + t)})
>>> records = sched.run()
>>> log, [r.action for r in records], all(r.ok for r in records)
(['x', '+x'], ['cut', 'restore'], True)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

from testbed.errors import ConfigError, TestbedError

Action = Callable[..., object]  # (target), (target, loss) or (target, **params)
Hook = Callable[["FaultRecord"], None]


@dataclass(frozen=True)
class Fault:
    """One planned action: ``action`` on ``target``, ``at_s`` seconds after the start.

    ``loss`` (a fraction) is passed on as a second argument to actions that take it;
    ``params`` as keyword arguments.
    """

    at_s: float
    action: str
    target: str
    loss: float | None = None
    params: dict = field(default_factory=dict, compare=False)


@dataclass
class FaultRecord:
    """What happened: planned and actual times (epoch seconds) and the outcome."""

    at_s: float
    action: str
    target: str
    planned: float = 0.0
    started: float = 0.0
    done: float = 0.0
    ok: bool = False
    error: str | None = None
    result: object = None

    @property
    def lateness_ms(self) -> float:
        return round((self.started - self.planned) * 1000, 3)

    def to_dict(self) -> dict:
        data = asdict(self)
        data["lateness_ms"] = self.lateness_ms
        return data


class Schedule:
    """Runs ``faults`` in time order, calling ``actions[fault.action](fault.target)``."""

    def __init__(self, faults: Sequence[Fault], actions: Mapping[str, Action], *,
                 before: Hook | None = None, after: Hook | None = None,
                 before_lead_s: float = 0.0) -> None:
        for i, f in enumerate(faults):
            if f.action not in actions:
                raise ConfigError(f"faults[{i}].action", f"unknown action {f.action!r}")
            if f.at_s < 0:
                raise ConfigError(f"faults[{i}].at_s", "must be 0 or more")
        self.faults = sorted(faults, key=lambda f: f.at_s)
        self.actions = actions
        self.before, self.after = before, after
        #: ``before`` starts this long ahead of the planned time, in a thread of its own: a
        #: slow hook (a routing snapshot takes seconds under software emulation, and twice
        #: as long as the last one at times) never delays the fault, which fires on time
        #: and then waits for the hook before ``after``
        self.before_lead_s = before_lead_s
        self.records: list[FaultRecord] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def run(self, t0: float | None = None) -> list[FaultRecord]:
        """Execute the schedule now (blocking); ``t0`` is the epoch time of ``at_s = 0``.

        An action that raises (a :class:`TestbedError`, ``OSError``, or any other error
        of a plug-in kind's code) is recorded as failed with its error and the schedule
        goes on to the next fault; :meth:`stop` ends it early.
        """
        t0 = time.time() if t0 is None else t0
        for fault in self.faults:
            planned = t0 + fault.at_s
            rec = FaultRecord(fault.at_s, fault.action, fault.target, planned=planned)
            hook = None
            if self.before:
                if self._stop.wait(max(0.0, planned - self.before_lead_s - time.time())):
                    break
                hook = threading.Thread(target=self.before, args=(rec,), name="fault-before",
                                        daemon=True)
                hook.start()
            if self._stop.wait(max(0.0, planned - time.time())):
                if hook is not None:
                    hook.join()
                break
            rec.started = time.time()
            try:
                action = self.actions[fault.action]
                rec.result = (action(fault.target, fault.loss) if fault.loss is not None
                              else action(fault.target, **fault.params))
                rec.ok = True
            except (TestbedError, OSError) as exc:
                rec.error = str(exc)
            except Exception as exc:  # noqa: BLE001 (a plug-in's bug: recorded, not fatal)
                rec.error = f"{type(exc).__name__}: {exc}"[:500]
            rec.done = time.time()
            if hook is not None:
                hook.join()
            self.records.append(rec)
            if self.after:
                self.after(rec)
        return self.records

    def start(self, t0: float | None = None) -> None:
        """Run in a background thread; :meth:`join` waits for it."""
        self._thread = threading.Thread(target=self.run, args=(t0,), name="faults", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def running(self) -> bool:
        """Whether the schedule's thread is still at work (an action in progress)."""
        return self._thread is not None and self._thread.is_alive()

    def join(self, timeout: float | None = None) -> None:
        if self._thread:
            self._thread.join(timeout)
