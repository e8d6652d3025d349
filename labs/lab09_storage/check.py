"""Lab 9 checks: a node-local cache sized from the objects' popularity (``testbed check 9
RESULTS``), on a results folder of ``labs/lab09_storage/*/scenario.yaml``: the retriever
reading from the store (``uncached``), then through each GPU node's cache (``cached``).

The cache's size is graded from the run's own record of its scenario (manifest.json's
``scenario_source``, parsed with the storage kind's validator), against the popularity
arithmetic of the objects the run stored.

>>> from testbed.experiments.storage.schema import validate
>>> s = validate({"objects": {"keys": 100, "sizes_kb": [16, 64, 64, 256], "zipf": 1.0}})
>>> fewest_keys(s.objects, 0.75), round(share(s.objects, 27), 3), top_kb(s.objects, 27)
(27, 0.75, 2652)
>>> smallest_cache_mb(s.objects, 0.75), fits(s.objects, 1024), fits(s.objects, 3072)
(3, 11, 31)

Per student (``testbed start 9 --student ID``): the seed, the Zipf exponent and the order
of the objects' sizes vary, so the smallest cache differs (3 or 4 MB); the check grades
the cache against the run's objects and ``student-variant`` that they are the id's.

>>> from testbed.reports.students import Draw
>>> p = student_params(Draw(9, "ada"))
>>> p["keys"], p["zipf"] in ZIPF, p["sizes_kb"] in SIZE_ORDERS
(100, True, True)
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from testbed.core import layout
from testbed.experiments.storage.schema import Objects, StorageSection, validate
from testbed.reports.grading import Missing, Results, Verdict, verdict
from testbed.reports.predictions import Number
from testbed.reports.students import Draw, substitute
from traffic.object_reads import KeyPicker

STORE, CACHED = "uncached", "cached"
TARGET_SHARE = 0.75      # the cache holds the objects that draw >= 75 % of the reads
BUDGET_MB = 6            # the node's disk budget for its cache (node_disk_mb)
HEADER_KB = 4            # nginx keeps each object in a file with its header: 4 KB more
CLAIMED_SPEEDUP = 8.0    # the seed: node-local cached reads 8x faster than the cluster
P99_RATIO = 0.6          # cached chains' p99 at most 0.6x of uncached, in the same run
STORE_SCALING = 1.25     # the store's aggregate reads with the most readers vs one reader


def share(objects: Objects, k: int) -> float:
    """The share of reads the ``k`` most popular keys draw, by the popularity the
    retriever reads with (traffic/object_reads.py; for zipf 1.0, H_k / H_n)."""
    return KeyPicker(objects.keys, objects.zipf, seed=0).share(k)


def fewest_keys(objects: Objects, target: float) -> int:
    """The fewest most popular keys that draw at least ``target`` of the reads."""
    return next(k for k in range(1, objects.keys + 1) if share(objects, k) >= target - 1e-9)


def top_kb(objects: Objects, k: int) -> int:
    """KB the ``k`` most popular objects take in a cache (each with its header)."""
    return sum(objects.size(i) // 1024 + HEADER_KB for i in range(k))


def fits(objects: Objects, cache_kb: float) -> int:
    """How many of the most popular objects fit ``cache_kb`` KB, in popularity order."""
    return next((k for k in range(objects.keys) if top_kb(objects, k + 1) > cache_kb),
                objects.keys)


def smallest_cache_mb(objects: Objects, target: float) -> int:
    """The smallest whole number of MB that holds the keys drawing ``target`` of reads."""
    return math.ceil(top_kb(objects, fewest_keys(objects, target)) / 1024)


def storage_config(r: Results) -> StorageSection:
    """The ``storage:`` section the run ran with (manifest.json), defaults filled in."""
    path = r.folder / layout.MANIFEST
    if not path.is_file():
        raise Missing(f"no {layout.MANIFEST} in {r.folder} (the run's record of its scenario)")
    source = json.loads(path.read_text()).get("scenario_source") or {}
    if "storage" not in source:
        raise Missing(f"{layout.MANIFEST} has no scenario_source.storage (not a storage run)")
    return validate(source["storage"])


def store_does_not_scale(r: Results) -> Verdict:
    """The lesson: one store behind one link: reading from it with more nodes at once
    adds (almost) nothing."""
    steps = sorted(r.value(STORE, "throughput"), key=lambda t: t["readers"])
    one, most = steps[0], steps[-1]
    ok = len(steps) > 1 and most["mbps"] <= STORE_SCALING * one["mbps"]
    said = ", ".join(f"{t['readers']}: {t['mbps']:g}" for t in steps)
    return verdict(ok, f"store reads, readers: Mb/s: {said} ({most['mbps'] / one['mbps']:.2f}x "
                       f"with {most['readers']} readers; a store that scaled would give "
                       f"more than {STORE_SCALING:g}x)")


def reads_faster_from_cache(r: Results) -> Verdict:
    """The lesson (the seed's 8x): a read the node's cache serves is at least 8x faster
    (p50) than a read from the store."""
    store = r.value(STORE, "reads.read_ms.p50")
    hit = r.value(CACHED, "reads.hit_ms.p50")
    x = store / hit if hit else math.inf
    return verdict(x >= CLAIMED_SPEEDUP, f"read p50 {store:.1f} ms from the store, {hit:.2f} ms "
                                         f"from the cache: {x:.1f}x (the seed: "
                                         f"{CLAIMED_SPEEDUP:g}x)")


def chains_p99_cut(r: Results) -> Verdict:
    """Student task: the chains' p99 with the cache at most 0.6x of the chains' p99
    reading from the store, in the same run (the starter's 1 MB cache loses still popular
    objects at every pass of nginx's cache manager: their second misses queue on the
    store's link, the chains' tail)."""
    store, cached = (r.value(n, "agents.latency_ms.p99") for n in (STORE, CACHED))
    return verdict(cached <= P99_RATIO * store,
                   f"chain p99 {cached:.0f} ms cached against {store:.0f} ms from the store "
                   f"({cached / store:.2f}x, needs <= {P99_RATIO:g}x)")


def cache_sized_from_popularity(r: Results) -> Verdict:
    """Student task: ``cache_mb`` is the smallest whole number of MB that holds the most
    popular objects drawing >= 75 % of the reads, within the node's 6 MB budget."""
    s = storage_config(r)
    objects, mb = s.objects, s.cache_mb
    need_k = fewest_keys(objects, TARGET_SHARE)
    need_mb = smallest_cache_mb(objects, TARGET_SHARE)
    held = fits(objects, mb * 1024)
    said = (f"cache_mb {mb} holds the top {held} objects, {share(objects, held):.0%} of the "
            f"reads; {TARGET_SHARE:.0%} needs the top {need_k} "
            f"({top_kb(objects, need_k):,} KB with headers)")
    if s.node_disk_mb != BUDGET_MB:
        return verdict(False, f"node_disk_mb is {s.node_disk_mb}, the node's budget is "
                              f"{BUDGET_MB} MB: leave it")
    if mb > BUDGET_MB:
        return verdict(False, f"{said}; but {mb} MB is over the node's {BUDGET_MB} MB")
    if mb < need_mb:
        return verdict(False, f"{said}: too small")
    if mb > need_mb:
        return verdict(False, f"{said}: {need_mb} MB already does it (the smallest)")
    return verdict(True, f"{said}: {need_mb} MB is the smallest")


CHECKS = [store_does_not_scale, reads_faster_from_cache, cache_sized_from_popularity,
          chains_p99_cut]


def _scaling(r: Results) -> float:
    steps = sorted(r.value(STORE, "throughput"), key=lambda t: t["readers"])
    return steps[-1]["mbps"] / steps[0]["mbps"]


#: the guide's "Predict, then run" questions 2 (a hit's speed-up over a store read,
#: p50) and 3 (the store's aggregate reads, most readers over one) graded against the run
#: (predictions.yaml), right within 25 %
PREDICTIONS = [
    Number("2", lambda r: r.value(STORE, "reads.read_ms.p50") / r.value(CACHED, "reads.hit_ms.p50"),
           unit="x", within=0.25),
    Number("3", _scaling, unit="x", within=0.25),
]


# --- per-student variants (testbed start 9 --student ID) --------------------------------

#: the Zipf exponents and orders of the objects' sizes a student may get (100 keys, the
#: same four sizes: the store's load and the run's length stay those of the measured
#: runs). Each gives a smallest cache of 3 or 4 MB that holds 75-82 % of the reads (the
#: measured solution: 3 MB, 77.6 %), within the 6 MB budget, and the starter's 1 MB
#: holds 49-64 % (too small for every student)
ZIPF = (0.95, 1.0, 1.05, 1.1)
SIZE_ORDERS = ([16, 64, 64, 256], [64, 16, 256, 64], [256, 64, 64, 16], [64, 256, 16, 64])
KEYS = 100


def student_params(draw: Draw) -> dict:
    return {"keys": KEYS, "zipf": draw.pick("zipf", ZIPF),
            "sizes_kb": list(draw.pick("sizes_kb", SIZE_ORDERS))}


def personalize(folder: Path, params: dict) -> None:
    """Write a student's objects into their copy of scenario.yaml (the comments too)."""
    path = folder / "scenario.yaml"
    text, where = path.read_text(), str(path)
    z = f"{params['zipf']:g}"
    sizes = ", ".join(map(str, params["sizes_kb"]))
    text = substitute(text, r"^    sizes_kb: \[.*\]$", f"    sizes_kb: [{sizes}]", where)
    text = substitute(text, r"^    zipf: .*$", f"    zipf: {z}", where)
    text = substitute(text, r"^    keys: \d+$", f"    keys: {params['keys']}", where)
    text = substitute(text, r"# key i \(0\.\.99\) is .*$",
                      f"# key i (0..99) is sizes_kb[i % 4] KB, read with weight "
                      f"1/(i+1)^{z}", where)
    text = substitute(text, r"^# which together draw at least 75 % of the reads \(with zipf "
                      r"1\.0 the top k of n keys$",
                      f"# which together draw at least 75 % of the reads (with zipf {z} the "
                      "top k of n keys", where)
    text = substitute(text, r"^# draw H_k / H_n of them, H_k = 1 \+ 1/2 \+ \.\.\. \+ 1/k\), "
                      r"within the node's budget$",
                      f"# draw S_k / S_n of them, S_k = 1 + 1/2^{z} + ... + 1/k^{z}), within "
                      "the node's budget", where)
    path.write_text(text)


def student_stated(r: Results) -> dict:
    """The objects the run stored (manifest.json's scenario, defaults filled in)."""
    objects = storage_config(r).objects
    return {"keys": objects.keys, "zipf": objects.zipf, "sizes_kb": list(objects.sizes_kb)}
