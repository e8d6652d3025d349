"""The storage section of a scenario: its shape, the room its objects need, and the
checks no shape can say (pure, but for the free room read from the data folder's disk)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from testbed.errors import ConfigError
from testbed.experiments import base
from testbed.storage.cache import check_budget
from testbed.storage.seaweedfs import StoreSize
from topologies.params import Section

#: room the store takes beside its objects (filer log and metadata, master state): an
#: allowance, not a measurement
STORE_OVERHEAD_MB = 32.0


class Objects(Section):
    """What the store holds: ``keys`` objects, key ``i`` of ``sizes_kb[i % len]`` KB,
    read with Zipf popularity of exponent ``zipf``."""

    keys: int = Field(100, ge=1, le=100_000, description="objects in the store")
    sizes_kb: list[Annotated[float, Field(gt=0, le=65536)]] = Field(
        default_factory=lambda: [64.0], min_length=1,
        description="object sizes, KB: key i has sizes_kb[i % len]")
    zipf: float = Field(1.0, ge=0, le=5, description="exponent of the Zipf popularity of "
                                                     "the reads (0: uniform)")

    def size(self, index: int) -> int:
        return int(self.sizes_kb[index % len(self.sizes_kb)] * 1024)

    @property
    def total_mb(self) -> float:
        return sum(self.size(i) for i in range(self.keys)) / 2**20


class StorageSection(Section):
    """The ``storage:`` section of a scenario."""

    gpu_nodes: int = Field(8, ge=1, le=16, description="GPU nodes (each with its cache)")
    gpu_leaves: int = Field(2, ge=1, le=8, description="leaves the GPU nodes hang off")
    spines: int = Field(2, ge=1, le=4, description="spines (the storage node has a leaf of "
                                                   "its own)")
    link_mbps: float = Field(100, gt=0, le=100_000, description="every link's rate, Mb/s")
    objects: Objects = Field(default_factory=Objects, description="what the store holds and "
                                                                  "how it is read")
    #: each GPU node's cache and the disk it may use at most (in the lab both live in the
    #: run folder, a tmpfs on most hosts: RAM; the kind's host check bounds their sum)
    cache_mb: int = Field(64, ge=1, description="each GPU node's cache, MB (nginx max_size)")
    node_disk_mb: int = Field(256, ge=1, description="disk each GPU node may use, MB")
    store: StoreSize = Field(default_factory=StoreSize, description="how big the S3 store "
                                                                    "may grow")
    chain_concurrency: int = Field(2, ge=1, le=64, description="agent chains in flight")
    chain_timeout_ms: float = Field(5000, gt=0, description="ms after which a chain counts "
                                                            "as failed")
    readers: list[Annotated[int, Field(ge=1)]] = Field(
        default_factory=lambda: [1, 2, 4, 8], min_length=1,
        description="numbers of nodes reading at once in the throughput test")
    read_seconds: float = Field(5, gt=0, le=600, description="seconds of each throughput "
                                                             "measurement")


def validate(section: Any, where: str = "storage") -> StorageSection:
    """The ``storage:`` section checked; ConfigError naming the field otherwise (pure).

    >>> validate({"objects": {"sizes_kb": [-4]}})
    Traceback (most recent call last):
    testbed.errors.ConfigError: storage.objects.sizes_kb[0]: must be greater than 0, got -4
    >>> validate({"cache_mb": 512, "node_disk_mb": 256})
    Traceback (most recent call last):
    testbed.errors.ConfigError: storage.cache_mb: 512 MB is larger than the node's disk \
budget of 256 MB
    >>> validate({"gpu_nodes": 2, "readers": [1, 4]})
    Traceback (most recent call last):
    testbed.errors.ConfigError: storage.readers[1]: 4 readers, but only 2 GPU nodes
    """
    parsed = base.Experiment.section(StorageSection, section, where)
    if parsed.gpu_leaves > parsed.gpu_nodes:
        raise ConfigError(f"{where}.gpu_leaves", f"{parsed.gpu_leaves} leaves for "
                          f"{parsed.gpu_nodes} GPU nodes: a leaf without nodes")
    check_budget(parsed.cache_mb, parsed.node_disk_mb, f"{where}.cache_mb")
    for i, n in enumerate(parsed.readers):
        if n > parsed.gpu_nodes:
            raise ConfigError(f"{where}.readers[{i}]",
                              f"{n} readers, but only {parsed.gpu_nodes} GPU nodes")
    capacity = parsed.store.capacity_mb
    if parsed.objects.total_mb > capacity / 2:
        raise ConfigError(f"{where}.objects", f"{parsed.objects.total_mb:.0f} MB of objects "
                                              f"do not fit half the store ({capacity} "
                                              "MB: store.volume_mb x store.volumes)")
    return parsed


def room_needed(s: StorageSection) -> dict[str, float]:
    """MB a run can write into its data folder at most: the store holds every object once
    (up to its capacity) plus its own files, each GPU node's cache every object once (up
    to ``cache_mb``). Variants run one after the other and each removes its data.

    >>> room_needed(validate({}))  # 100 objects of 64 KB: one copy, then 8 cached ones
    {'store': 38.2, 'caches': 50.0}
    """
    objects = s.objects.total_mb
    store = min(objects, s.store.capacity_mb) + STORE_OVERHEAD_MB
    return {"store": round(store, 1), "caches": round(s.gpu_nodes * min(objects, s.cache_mb), 1)}


def check_room(s: StorageSection, free_mb: float, folder: Path, where: str = "storage") -> None:
    """ConfigError naming the field to lower unless what the run can write fits the
    ``free_mb`` of ``folder``.

    >>> check_room(validate({}), 400, Path("/run"))
    >>> check_room(validate({"objects": {"keys": 1000}}), 400, Path("/run"))
    Traceback (most recent call last):
    testbed.errors.ConfigError: storage.cache_mb: the run can write up to 594 MB (store \
94 MB, 8 caches of 62 MB) into /run, which has 400 MB free (a tmpfs holds it in RAM)
    """
    need = room_needed(s)
    total = need["store"] + need["caches"]
    if total <= free_mb:
        return
    field = "cache_mb" if need["caches"] >= need["store"] else "objects"
    raise ConfigError(f"{where}.{field}", f"the run can write up to {total:.0f} MB (store "
                      f"{need['store']:.0f} MB, {s.gpu_nodes} caches of "
                      f"{need['caches'] / s.gpu_nodes:.0f} MB) into {folder}, which has "
                      f"{free_mb:.0f} MB free (a tmpfs holds it in RAM)")
