"""What an experiment kind is: a section schema, variants, and how to run one of them.

The runner (:mod:`testbed.core.runner`) knows no kind by name. It asks the scenario's kind
for its variants and seeds, hands each variant a results folder (from
:class:`~testbed.core.layout.Layout`), a :class:`RunContext` and an index, collects the
``runs`` entries, and lets the kind add its own top-level summary section, report
section and terminal table. A new kind is one module with one subclass of
:class:`Experiment`, plus one line ``testbed.experiments.KINDS.add(name, module)``.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from testbed.core.fidelity import Monitor, WatchedLink
from testbed.errors import ConfigError, parse_section
from testbed.host.capabilities import Capabilities
from testbed.monitor.schema import Watching
from topologies.params import Section

Progress = Callable[[str], None]


@dataclass
class RunContext:
    """What the runner hands every variant of one run."""

    caps: Capabilities
    #: the results folder of the whole run (variants have their own folders below it)
    root: Path
    duration_s: float
    progress: Progress
    #: the run-wide stack: undo steps that must outlive one variant (run folders)
    stack: ExitStack
    #: a run id chosen by the caller (tests that look for leftovers by it), else None
    run_id: str | None = None
    #: the fidelity monitor beside the variant that runs (set by the runner), else None
    monitor: Monitor | None = None
    #: the scenario's ``monitor`` key: watch each variant live (dashboard, Prometheus)
    watching: Watching | None = None
    #: the other machines a fabric is spread over (:mod:`testbed.cluster.servers`)
    servers: tuple = ()

    @contextmanager
    def watch(self, links: Iterable[WatchedLink] = ()) -> Iterator[None]:
        """The measured part of a variant (its traffic, not bring-up or teardown): the
        fidelity monitor judges the samples taken inside and watches ``links``, the
        shaped egress queues, for saturation. Leave it before the links go."""
        if self.monitor is None:
            yield
            return
        with self.monitor.watching(links):
            yield


@dataclass(frozen=True)
class VariantRef:
    """A variant of a kind that keeps its variants as plain names."""

    name: str


class Experiment(ABC):
    """One experiment kind, parsed from a scenario (pure: nothing on the host changes)."""

    #: the kind's name (``kind:`` in a scenario, and its key in the summary)
    KIND: ClassVar[str]
    #: top-level scenario keys this kind reads -> their model (for ``testbed schema``);
    #: a kind is chosen by ``kind:`` or by the first of these keys a scenario has
    SECTIONS: ClassVar[dict[str, type[Section] | dict]] = {}
    #: ``package.module:Class`` of the lab that keeps one of its variants up
    #: (``testbed up``); None: the kind has none
    LAB: ClassVar[str | None] = None
    #: the lab starts the scenario's workloads when asked (``testbed up --traffic``)
    LAB_TRAFFIC: ClassVar[bool] = False
    #: the lab can be spread over several machines (``testbed up --servers``)
    LAB_SERVERS: ClassVar[bool] = False
    #: each variant runs and is summarized on its own, so ``testbed run --variant`` may
    #: run only some (a kind whose summary compares its variants runs them all)
    SOME_VARIANTS: ClassVar[bool] = False

    @classmethod
    def lab_class(cls) -> type:
        """The class of the kind's lab (imported now); ConfigError if it has none."""
        if cls.LAB is None:
            from testbed import experiments

            can = [k for k in experiments.KINDS if experiments.KINDS[k].LAB]
            raise ConfigError("SCENARIO", f"a {cls.KIND} scenario cannot be kept up as a "
                                          f"lab ({' and '.join(can)} scenarios can)")
        module, _, name = cls.LAB.partition(":")
        return getattr(importlib.import_module(module), name)

    @classmethod
    def scale_rates(cls, data: dict, factor: float) -> dict:
        """The scenario document with every rate times ``factor`` (``testbed run --fit``);
        ConfigError when the kind cannot scale its rates."""
        raise ConfigError("--fit", f"a {cls.KIND} scenario's rates cannot be scaled to fit "
                                   "a host (fabric scenarios' can)")

    def __init__(self, data: dict, *, name: str, seed: int, seeds: tuple[int, ...],
                 duration_s: float) -> None:
        self.data = data
        self.name = name
        self.seed = seed
        self.seeds = seeds
        self.duration_s = duration_s

    # -- validation (pure) -------------------------------------------------------------
    @staticmethod
    def section(model: type[Section], data: Any, where: str) -> Section:
        """A section parsed with its model; ConfigError naming the field otherwise."""
        return parse_section(model, data, where)

    @property
    @abstractmethod
    def variants(self) -> tuple[Any, ...]:
        """The variants, each with a ``name``, in run order."""

    def describe(self) -> str:
        """One line for ``testbed validate``."""
        names = ", ".join(v.name for v in self.variants)
        return f"{len(self.variants)} variants ({names}), {self.KIND} experiment"

    def check_host(self, caps: Capabilities) -> None:
        """Refuse (ConfigError) what this host cannot run, before anything is created."""
        return None

    # -- running -----------------------------------------------------------------------
    def start(self, ctx: RunContext) -> None:
        """Before the first variant (shared state, a run folder on ``ctx.stack``)."""
        return None

    @abstractmethod
    def run_variant(self, variant: Any, *, seed: int, out: Path, tag: str,
                    ctx: RunContext) -> dict:
        """Bring up, measure and tear down one variant into ``out``; its ``runs`` entry
        (at least ``name``, ``fabric``, ``agents``, ``training``)."""

    def finish(self, runs: list[dict], out: Path, ctx: RunContext) -> dict:
        """Top-level summary keys of this kind (e.g. ``{"macsec": {...}}``), after every
        variant ran. Files it names go into ``out``."""
        return {}

    # -- reporting (from summary.json alone, so a results folder can be re-rendered) ----
    @staticmethod
    def report_section(summary: dict, out: Path) -> list[str]:
        """Markdown lines of this kind's own report section."""
        return []

    @staticmethod
    def table(summary: dict) -> str | None:
        """The terminal table of this kind, or None for the common one."""
        return None
