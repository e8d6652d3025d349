"""The storage kind: agent chains whose retriever reads objects, with and without a
node-local cache in front of the lab's S3 store.

The fabric is a leaf-spine drawn for it (:func:`storage_topology`): GPU nodes on their
leaves, the storage node alone behind a leaf of its own, every leaf cabled to every
spine, so a read from the store crosses leaf, spine and leaf. The store is SeaweedFS
on the storage node (:mod:`testbed.storage.seaweedfs`), filled with ``objects.keys``
objects before traffic; in variant ``cached`` every GPU node has its nginx cache
(:mod:`testbed.storage.cache`) and reads through it, in ``uncached`` it reads from the
store directly. Each variant measures

* agent chains for the run's duration, the retriever on the first GPU node reading one
  Zipf-popular object per request: read p50/p99 (hits and misses apart), hit ratio,
  chain p50/p99;
* aggregate read throughput of 1, 2, 4, 8 ... GPU nodes reading at once
  (``readers``), ``read_seconds`` each;
* bytes served per source: the caches' own counts (``caches``: every read they served,
  split into ``chains``, the retriever's reads, and ``throughput``, the readers' of
  the throughput step), and the store's.

A hit is a read served from the cache (nginx's HIT, STALE, REVALIDATED, UPDATING:
:data:`testbed.storage.cache.FROM_CACHE`), in the retriever's ``reads`` as in the
caches' counts.

The seed's claim, reads from a node-local cache 8x faster than from the storage
cluster, is checked in scaled form: the ratio of the uncached to the cached read p50.
"""

from __future__ import annotations

import json
import shutil
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from testbed.core import layout
from testbed.core.results import ZERO_TRAINING, agents_entry
from testbed.errors import BringUpError
from testbed.experiments import base
from testbed.experiments.fabric.run import watched_ports
from testbed.experiments.storage.schema import StorageSection, check_room, validate
from testbed.fabric.bringup import bring_up
from testbed.host.files import read_jsonl
from testbed.host.hosts import Host
from testbed.host.naming import RUN_ROOT, new_run_id, run_prefix
from testbed.host.procs import python_env
from testbed.monitor import launch as monitor
from testbed.storage import s3
from testbed.storage.cache import FROM_CACHE, nginx_binary, read_counts, start_cache
from testbed.storage.seaweedfs import BUCKET, S3_PORT, start_store, weed_binary
from testbed.workloads.chains import SERVICES, Service, start_driver, start_services
from topologies.build import build_topology
from traffic.object_reads import key_name
from traffic.stats import summary

#: the seed's claim: node-local cached reads this many times faster than the cluster's
CLAIMED_SPEEDUP = 8.0
#: the storage node's name in the topology (before the run's prefix)
STORAGE_NODE = "st"












def data_folder() -> Path:
    """The folder whose file system holds a run's store and caches (``RUN_ROOT/RUNID/
    storage``): the nearest one that exists before the run."""
    folder = RUN_ROOT
    while not folder.exists():
        folder = folder.parent
    return folder


def gpu_names(s: StorageSection) -> list[str]:
    """The GPU nodes' names in :func:`storage_topology` (before the run's prefix).

    >>> gpu_names(validate({"gpu_nodes": 3, "gpu_leaves": 1, "readers": [1]}))
    ['g1', 'g2', 'g3']
    """
    return [f"g{i + 1}" for i in range(s.gpu_nodes)]


def storage_topology(s: StorageSection) -> dict:
    """The explicit graph: GPU nodes ``g1..`` on leaves ``l1..``, the storage node ``st``
    alone on leaf ``ls``, every leaf cabled to every spine ``s1..``.

    >>> t = storage_topology(StorageSection(gpu_nodes=3, gpu_leaves=2, spines=1))
    >>> [link["endpoints"] for link in t["links"]]  # doctest: +NORMALIZE_WHITESPACE
    [['g1', 'l1'], ['g2', 'l1'], ['g3', 'l2'], ['st', 'ls'], ['l1', 's1'], ['l2', 's1'],
     ['ls', 's1']]
    """
    spines = [f"s{i + 1}" for i in range(s.spines)]
    leaves = [f"l{i + 1}" for i in range(s.gpu_leaves)]
    gpus = gpu_names(s)
    nodes = {name: {"kind": "switch"} for name in [*spines, *leaves, "ls"]}
    nodes |= {name: {"kind": "host"} for name in [*gpus, STORAGE_NODE]}
    links = [{"endpoints": [g, leaves[i * s.gpu_leaves // s.gpu_nodes]]}
             for i, g in enumerate(gpus)]
    links.append({"endpoints": [STORAGE_NODE, "ls"]})
    links += [{"endpoints": [leaf, spine]} for leaf in [*leaves, "ls"] for spine in spines]
    return {"nodes": nodes, "links": links, "link_mbps": s.link_mbps}


def read_entry(records: list[dict]) -> dict:
    """Read latency (all, hits, misses) and hit ratio of the retriever's read records; a
    hit is a read served from the cache (``FROM_CACHE``), as in the caches' own counts.

    >>> e = read_entry([{"status": 200, "cache": "HIT", "seconds": 0.002},
    ...                 {"status": 200, "cache": "MISS", "seconds": 0.02},
    ...                 {"status": 200, "cache": "STALE", "seconds": 0.004},
    ...                 {"status": 0, "cache": None, "seconds": 1.0}])
    >>> e["reads"], e["errors"], e["hit_ratio"], e["read_ms"]["p50"], e["hit_ms"]["p50"]
    (3, 1, 0.667, 4.0, 3.0)
    """
    ok = [r for r in records if r["status"] == 200]
    hits = [r for r in ok if r["cache"] in FROM_CACHE]
    cached = [r for r in ok if r["cache"]]
    return {"reads": len(ok), "errors": len(records) - len(ok),
            "hit_ratio": round(len(hits) / len(cached), 3) if cached else None,
            "read_ms": _ms_summary(ok), "hit_ms": _ms_summary(hits),
            "miss_ms": _ms_summary([r for r in cached if r["cache"] not in FROM_CACHE])}


def _ms_summary(records: list[dict]) -> dict | None:
    """Percentiles in ms of the records' ``seconds``."""
    return summary([1000 * r["seconds"] for r in records])


def cache_entry(reads: list[list[dict]], during_chains: list[int]) -> dict:
    """The caches' counts of every read they served (what the store's byte count
    matches), and apart: ``chains`` (the first ``during_chains[i]`` records of cache
    ``i``: the retriever's reads) and ``throughput`` (the rest: the throughput step's).

    >>> e = cache_entry([[{"cache": "MISS", "bytes": 4}, {"cache": "HIT", "bytes": 4},
    ...                   {"cache": "HIT", "bytes": 4}], [{"cache": "MISS", "bytes": 4}]],
    ...                 [2, 0])
    >>> e["reads"], e["chains"]["hit_ratio"], e["throughput"]["reads"]
    (4, 0.5, 2)
    """
    chains = [r for rs, n in zip(reads, during_chains, strict=True) for r in rs[:n]]
    rest = [r for rs, n in zip(reads, during_chains, strict=True) for r in rs[n:]]
    return {**read_counts(chains + rest), "chains": read_counts(chains),
            "throughput": read_counts(rest)}


class Variant:
    """One variant run: a fabric, the store, caches if ``cached``, then the traffic."""

    def __init__(self, s: StorageSection, cached: bool, *, seed: int, out: Path,
                 ctx: base.RunContext, tag: str) -> None:
        self.s, self.cached, self.seed, self.out, self.ctx, self.tag = (
            s, cached, seed, out, ctx, tag)
        #: set once the fabric is up: the GPU nodes, their lab addresses, and where each
        #: reads objects (its cache, or the store)
        self.gpus: list[Host] = []
        self.gpu_ips: list[str] = []
        self.endpoints: list[str] = []

    def run(self) -> dict:
        s, ctx, out = self.s, self.ctx, self.out
        run_id = new_run_id()
        prefix = run_prefix(run_id)
        spec = build_topology(storage_topology(s), prefix)
        gpu_specs = [spec.host(prefix + name) for name in gpu_names(s)]
        node = spec.host(prefix + STORAGE_NODE)
        entry: dict = {"name": "cached" if self.cached else "uncached", "run_id": run_id,
                       "seed": self.seed}
        with ExitStack() as stack:
            live = bring_up(spec, ctx.caps, run_id=run_id, controller={"mode": "ecmp"},
                            out=out, stack=stack, seed=self.seed)
            fabric = live.fabric
            self.gpus = [fabric.host(h.name) for h in gpu_specs]
            self.gpu_ips = [h.interface(0, 0).ip for h in gpu_specs]
            folder = live.pid_dir / "storage"
            store = start_store(fabric.host(node.name), node.interface(0, 0).ip,
                                folder=folder, pid_dir=live.pid_dir, stack=stack,
                                log=out / layout.STORE_LOG, size=s.store)
            ctx.progress(f"{self.tag}: fabric up in {live.times.start_s:.2f} s, store in "
                         f"{store.start_s:.2f} s ({store.resident_mb():.0f} MB)")
            self._fill(store)
            caches = [start_cache(gpu, f"{store.ip}:{S3_PORT}", folder=folder,
                                  pid_dir=live.pid_dir, stack=stack, max_mb=s.cache_mb,
                                  logs=out, name=f"cache-{i}") for i, gpu in enumerate(self.gpus)
                      ] if self.cached else []
            self.endpoints = ([c.endpoint for c in caches] if caches
                              else [store.endpoint] * len(self.gpus))
            watched = monitor.watch_run(ctx, live, out=out, stack=stack, tag=self.tag,
                                        kind="storage")
            with ExitStack() as window:
                with ExitStack() as services:  # started before the measured window
                    self._start_services(live.pid_dir, services)
                    window.enter_context(ctx.watch(watched_ports(fabric)))
                    self._chains(live.pid_dir, services)
                during_chains = [len(c.reads()) for c in caches]
                entry["throughput"] = [self._throughput(n, live.pid_dir) for n in s.readers]
            if watched is not None:
                entry["monitor"] = {**watched.record(), "cpu": watched.cpu()}
            entry["bytes_sent_by_store"] = int(store.bytes_sent(self.gpus[0]))
            entry["caches"] = cache_entry([c.reads() for c in caches], during_chains)
            entry["store_start_s"] = round(store.start_s, 2)
            entry["store_resident_mb"] = round(store.resident_mb(), 1)
            stack.close()
            entry["fabric"] = {**spec.counts(), "start_s": round(live.times.start_s, 3),
                               "stop_s": round(fabric.times.stop_s, 3)}
        entry["reads"] = read_entry(list(read_jsonl(out / layout.READS)))
        entry["agents"] = agents_entry(out / layout.CHAINS)
        entry["training"] = dict(ZERO_TRAINING)
        return entry

    def _fill(self, store) -> None:
        """Put every object into the store, from the store's own node: set-up, not a
        measurement, so the objects need not cross the fabric (at the scenarios' 20 Mb/s
        their 9.8 MB took 4.9 s a variant)."""
        endpoint = store.endpoint
        t0 = time.monotonic()
        objects = self.s.objects
        by_size: dict[int, list[str]] = {}
        for i in range(objects.keys):
            by_size.setdefault(objects.size(i), []).append(key_name(i))
        for size, keys in by_size.items():
            for start in range(0, len(keys), 200):  # one command line holds 200 keys
                put = s3.run_in(store.host, "put", endpoint, BUCKET,
                                *keys[start:start + 200], "--size", str(size),
                                "--seed", str(self.seed), timeout=600)
                failed = [p["key"] for p in put if p["status"] != 200]
                if failed:
                    raise BringUpError(f"the store refused objects {failed[:3]} (see "
                                       f"{self.out / 'store.log'})")
        self.ctx.progress(f"{self.tag}: {objects.keys} objects ({objects.total_mb:.1f} MB) "
                          f"stored in {time.monotonic() - t0:.1f} s")

    def _start_services(self, pid_dir: Path, stack: ExitStack) -> None:
        """The chains' services; the retriever reads on the first GPU node."""
        s, out, n = self.s, self.out, len(self.gpus)
        at = {svc: min(i, n - 1) for i, svc in enumerate(SERVICES)}
        where = {svc: Service(self.gpus[i], [self.gpu_ips[i]]) for svc, i in at.items()}
        reads = ["--objects", f"{self.endpoints[at['retriever']]}/{BUCKET}",
                 "--keys", str(s.objects.keys), "--zipf", f"{s.objects.zipf:g}",
                 "--seed", str(self.seed), "--reads-out", str(out / layout.READS)]
        start_services(where, out=out, pid_dir=pid_dir, stack=stack,
                       extra={"retriever": reads})

    def _chains(self, pid_dir: Path, stack: ExitStack) -> None:
        """Agent chains for the run's duration, through the services started."""
        s, n = self.s, len(self.gpus)
        driver = start_driver(self.gpus[min(1, n - 1)], out=self.out, pid_dir=pid_dir,
                              duration_s=self.ctx.duration_s, seed=self.seed,
                              concurrency=s.chain_concurrency,
                              timeout_ms=s.chain_timeout_ms, stack=stack)
        driver.wait(self.ctx.duration_s + 30)

    def _throughput(self, readers: int, pid_dir: Path) -> dict:
        """``readers`` GPU nodes read at once for ``read_seconds``: aggregate Mb/s of
        the objects read (200 replies), from the first reader's start to the last one's
        end."""
        s = self.s
        files = [self.out / f"load-{readers}-{i}.json" for i in range(readers)]
        with ExitStack() as stack:
            loads = []
            for i in range(readers):
                argv = [*s3.CLIENT, "load", self.endpoints[i], BUCKET, "--seconds",
                        f"{s.read_seconds:g}", "--keys", str(s.objects.keys), "--zipf",
                        f"{s.objects.zipf:g}", "--seed", str(self.seed + i)]
                load = self.gpus[i].spawn(f"load-{i}", argv, pid_dir=pid_dir,
                                          env=python_env(), stdout_file=files[i],
                                          log=self.out / layout.LOAD_LOG)
                stack.callback(load.stop)
                loads.append(load)
            for load in loads:
                load.wait(s.read_seconds + 30)
        got = [json.loads(text) for f in files if (text := f.read_text().strip())]
        mbps = s3.aggregate_mbps(got)
        self.ctx.progress(f"{self.tag}: {readers} readers: {mbps:g} Mb/s")
        return {"readers": readers, "mbps": mbps, "reads": sum(g["reads"] for g in got),
                # a reader that printed nothing (killed at its deadline) counts as one error
                "errors": sum(g["errors"] for g in got) + readers - len(got)}


def speedup(runs: list[dict], of: str = "read_ms") -> float | None:
    """The uncached read p50 over the cached one (``of``: ``read_ms``, every cached
    read, misses too; ``hit_ms``, the hits alone): the seed's 8x, scaled.

    >>> runs = [{"name": "cached", "reads": {"read_ms": {"p50": 4.0}, "hit_ms": {"p50": 2.0}}},
    ...         {"name": "uncached", "reads": {"read_ms": {"p50": 20.0}, "hit_ms": None}}]
    >>> speedup(runs), speedup(runs, "hit_ms")
    (5.0, 10.0)
    """
    by_name = {r["name"]: r["reads"] for r in runs}
    if "cached" not in by_name or "uncached" not in by_name:
        return None
    cached = (by_name["cached"][of] or {}).get("p50")
    uncached = (by_name["uncached"]["read_ms"] or {}).get("p50")
    return round(uncached / cached, 2) if cached and uncached else None


class StorageExperiment(base.Experiment):
    """The ``storage:`` kind: ``uncached`` then ``cached``."""

    KIND = "storage"
    SECTIONS = {"storage": StorageSection}
    VARIANTS = (base.VariantRef("uncached"), base.VariantRef("cached"))

    def __init__(self, data: dict, **kw: Any) -> None:
        super().__init__(data, **kw)
        self.cfg = validate(data.get("storage"))

    @property
    def variants(self) -> tuple[base.VariantRef, ...]:
        return self.VARIANTS

    def spec(self, prefix: str):
        """The fabric both variants run on (what ``testbed graph`` draws)."""
        return build_topology(storage_topology(self.cfg), prefix)

    def check_host(self, caps: Any) -> None:
        """The store's and the caches' programs are here (HostError naming the package),
        and their data fits the free space of the run folder (ConfigError naming the
        field to lower)."""
        weed_binary()
        nginx_binary()
        folder = data_folder()
        check_room(self.cfg, shutil.disk_usage(folder).free / 2**20, folder)

    def run_variant(self, variant: base.VariantRef, *, seed: int, out: Path, tag: str,
                    ctx: base.RunContext) -> dict:
        return Variant(self.cfg, variant.name == "cached", seed=seed, out=out, ctx=ctx,
                       tag=tag).run()

    def finish(self, runs: list[dict], out: Path, ctx: base.RunContext) -> dict:
        result = {"claimed_speedup": CLAIMED_SPEEDUP, "speedup": speedup(runs),
                  "hit_speedup": speedup(runs, "hit_ms"),
                  "variants": {r["name"]: {"reads": r["reads"], "caches": r["caches"],
                                           "throughput": r["throughput"]} for r in runs}}
        ctx.progress(closing_note(result))
        return {"storage": result}

    @staticmethod
    def report_section(summary: dict, out: Path) -> list[str]:
        storage = summary["storage"]
        lines = ["## Storage: node-local cache against the store", "", closing_note(storage),
                 "", "| variant | retriever reads | hit ratio | read p50 | read p99 | hit p50 | "
                 "miss p50 | throughput (readers: Mb/s) |", "|---|---|---|---|---|---|---|---|"]
        for name, v in storage["variants"].items():
            r = v["reads"]
            tput = ", ".join(f"{t['readers']}: {t['mbps']:g}" for t in v["throughput"])
            ratio = "n/a" if r["hit_ratio"] is None else f"{r['hit_ratio']:.2f}"
            lines.append(f"| {name} | {r['reads']} | {ratio} | {_ms(r['read_ms'], 'p50')}"
                         f" | {_ms(r['read_ms'], 'p99')} | {_ms(r['hit_ms'], 'p50')} | "
                         f"{_ms(r['miss_ms'], 'p50')} | {tput} |")
        lines.append("")
        for name, v in storage["variants"].items():
            c = v["caches"]
            if c["reads"]:
                lines.append(f"The caches of `{name}` served {c['reads']} reads: "
                             f"{_part(c['chains'])} of the retriever (the table's), "
                             f"{_part(c['throughput'])} of the throughput step.")
        return [*lines, ""]


def closing_note(storage: dict) -> str:
    """One paragraph for the report: the seed's 8x against what the lab measured."""
    said = {k: "n/a" if storage[k] is None else f"{storage[k]:g}x"
            for k in ("speedup", "hit_speedup")}
    return (f"Read p50 from the store over read p50 through the node-local cache: "
            f"{said['speedup']} for every cached read (cold misses included), "
            f"{said['hit_speedup']} for the hits alone; the seed claims "
            f"{storage['claimed_speedup']:g}x for its cache against its storage cluster.")


def _part(counts: dict) -> str:
    ratio = "n/a" if counts["hit_ratio"] is None else f"{counts['hit_ratio']:.2f}"
    return f"{counts['reads']} (hit ratio {ratio})"


def _ms(stats: dict | None, key: str) -> str:
    return "n/a" if not stats else f"{stats[key]:.1f} ms"


EXPERIMENT = StorageExperiment
