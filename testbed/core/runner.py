"""Run a scenario: every variant of its experiment kind (once per seed), then the report.

The runner knows no kind by name: it probes the host once, asks the kind to refuse what
the host cannot run, hands each variant its folder (:class:`~testbed.core.layout.Layout`),
collects the ``runs`` entries (medians over seeds, :mod:`testbed.core.seeds`), writes
summary.json and manifest.json, and renders the report. Undo steps live on ExitStacks,
so success, an error, Ctrl-C and SIGTERM all unwind the same way, in reverse order.
"""

from __future__ import annotations

import os
import sys
import time
from contextlib import ExitStack
from pathlib import Path

from testbed.core import digest, fidelity, fidelity_verdict, layout
from testbed.core.layout import Layout
from testbed.core.scenario import Scenario, parse
from testbed.core.seeds import combine
from testbed.errors import ConfigError
from testbed.experiments.base import Progress, RunContext
from testbed.host.capabilities import probe
from testbed.host.files import write_json
from testbed.host.naming import new_run_id
from testbed.host.procs import sigterm_as_interrupt
from testbed.reports import report


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _done_line(tag: str, entry: dict) -> str:
    a, t = entry["agents"], entry["training"]
    lat = a["latency_ms"]
    line = f"{tag}: done; chains {a['chains_completed']}/{a['chains_started']}"
    if lat["p50"] is not None:
        line += f", p50 {lat['p50']:.1f} ms, p99 {lat['p99']:.1f} ms"
    if t["iterations"]:
        line += f"; training {t['goodput_mbps']:.1f} Mb/s"
    return line


def _fidelity_record(runs: list[dict]) -> dict:
    """The manifest's ``fidelity``: the monitor's thresholds and which runs (variant, seed)
    it flagged."""
    flagged = [{"variant": r["name"], "seed": e.get("seed"), "reasons": e["fidelity"]["reasons"]}
               for r in runs for e in (r.get("seeds") or [r])
               if not (e.get("fidelity") or {}).get("ok", True)]
    return {"thresholds": fidelity_verdict.THRESHOLDS.to_dict(), "file": layout.FIDELITY,
            "ok": not flagged, "flagged": flagged}


def run(scenario: Scenario, out: Path, progress: Progress = _stderr,
        run_id: str | None = None, monitor: bool = True, servers: tuple = (),
        fit: dict | None = None) -> dict:
    """Run every variant of ``scenario`` into ``out``; returns the summary. ``run_id``:
    the id of what a kind creates for the whole run (else a fresh one). ``servers``: the
    other machines a fabric is spread over. ``fit``: what ``--fit`` decided
    (:meth:`testbed.cluster.fit.Fit.to_dict`; the scenario given is already scaled),
    recorded in the summary and the manifest. ``monitor``:
    False runs without the fidelity monitor (to measure its own cost). ``out`` may be
    relative (``--out results/x``): it is made absolute here, since helpers (nginx, weed,
    forwarders) run in other working directories and take their paths from it."""
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    monitor_on = monitor
    experiment = scenario.experiment
    seeds = scenario.run_seeds
    lay = Layout(out, seeds)
    with sigterm_as_interrupt(), ExitStack() as stack:
        caps = probe(new_run_id())
        experiment.check_host(caps)
        progress(f"{scenario.name}: {scenario.kind} experiment, {len(scenario.variants)} "
                 f"variants x {len(seeds)} seed(s); results in {out}")
        summary = {
            "scenario": scenario.name,
            "kind": scenario.kind,
            "description": scenario.description,
            "seed": scenario.seed,
            "seeds": list(seeds),
            "duration_s": scenario.duration_s,
            "capabilities": caps.to_dict(),
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **({"fit": fit} if fit is not None else {}),
            # testbed run --variant: the folder holds these variants of the file's only
            **({"picked": list(scenario.picked)} if scenario.picked else {}),
            "runs": [],
        }
        write_json(out / layout.MANIFEST, {**summary, "fidelity": _fidelity_record([]),
                                           "scenario_source": scenario.source})
        ctx = RunContext(caps=caps, root=out, duration_s=scenario.duration_s, progress=progress,
                         stack=stack, run_id=run_id, watching=scenario.monitor,
                         servers=tuple(servers))
        experiment.start(ctx)
        total = len(scenario.variants) * len(seeds)
        per_seed: dict[str, list[dict]] = {}
        index = 0
        for seed in seeds:  # variants interleaved per seed: noise touches them alike
            for variant in scenario.variants:
                index += 1
                folder = lay.variant(variant.name, seed)
                folder.mkdir(parents=True, exist_ok=True)
                tag = f"[{index}/{total}] {variant.name}"
                with fidelity.Monitor(folder / layout.FIDELITY,
                                      enabled=monitor_on) as monitor:
                    ctx.monitor = monitor
                    try:
                        entry = experiment.run_variant(variant, seed=seed, out=folder,
                                                       tag=tag, ctx=ctx)
                    finally:
                        ctx.monitor = None
                entry["fidelity"] = fidelity_verdict.with_servers(monitor.result,
                                                          entry.get("servers", []))
                entry["dir"] = lay.relative(variant.name, seed)
                progress(_done_line(tag, entry))
                if not entry["fidelity"]["ok"]:
                    progress(f"{tag}: warning: do not trust these numbers: "
                             + "; ".join(entry["fidelity"]["reasons"]))
                per_seed.setdefault(variant.name, []).append(entry)
                summary["runs"] = [combine(name, e) for name, e in per_seed.items()]
                write_json(out / layout.SUMMARY, summary)
        own = experiment.finish([e for es in per_seed.values() for e in es], out, ctx)
    summary.update(own)
    # the kind's own record (e.g. the MACsec lab keys that decrypt its wire capture)
    write_json(out / layout.MANIFEST, {**summary, "fidelity": _fidelity_record(summary["runs"]),
                                       "scenario_source": scenario.source})
    fault_list = [{"variant": r["name"], **({"seed": r["seed"]} if "seed" in r else {}), **f}
                  for entries in per_seed.values() for r in entries
                  for f in r.get("faults", [])]
    if fault_list:
        summary["faults"] = fault_list
    summary["finished"] = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    write_json(out / layout.SUMMARY, summary)
    report.write(summary, out)
    digest.write(out)  # last: every record is final
    return summary


def run_section(kind: str, section: dict, out: Path, *, duration_s: float, seed: int = 1,
                progress: Progress = _stderr, run_id: str | None = None) -> dict:
    """Run one kind's section as a scenario of its own (tests, scripts)."""
    data = {"name": f"{kind}-section", "seed": seed, "duration_s": duration_s, kind: section}
    return run(parse(data), out, progress, run_id=run_id)


def default_out(results_root: Path, name: str, label: str = "") -> Path:
    """``results/NAME/LABELTIMESTAMP``, created now and this run's alone (a run started in
    the same second gets ``TIMESTAMP-2``, ...); ``results/latest`` will point there."""
    stamp = label + time.strftime("%Y%m%d-%H%M%S")
    (results_root / name).mkdir(parents=True, exist_ok=True)
    for n in range(1, 1000):
        out = results_root / name / (stamp if n == 1 else f"{stamp}-{n}")
        try:
            out.mkdir()
        except FileExistsError:
            continue
        return out
    raise ConfigError("OUT", f"{results_root / name} has 999 runs of {stamp}")


def link_latest(results_root: Path, out: Path) -> None:
    """Point ``results_root/latest`` at ``out`` by a relative path, so that the link
    still holds where the folder is seen under another path (the Vagrant VM's results,
    shared with the host; a copied or moved results folder)."""
    latest = results_root / "latest"
    if latest.exists() and not latest.is_symlink():
        return  # somebody's own folder of that name: left alone
    tmp = results_root / f".latest.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(os.path.relpath(out.resolve(), results_root.resolve()))
    tmp.replace(latest)  # atomically: latest never missing
