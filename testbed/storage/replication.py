"""Cross-region checkpoint writes over the backbone: stores, replication, figures.

The backbone kind's optional ``checkpoints:`` section (:class:`CheckpointSection`). Each
variant of the kind then runs one replication mode (``modes``, default both):

* ``async``: the source region's store acknowledges a shard at local latency and
  SeaweedFS's asynchronous filer replication (``weed filer.sync -isActivePassive``,
  run in the source region) migrates it to the destination region's store over the
  backbone (encrypted links, the faults of the schedule);
* ``sync``: the writer PUTs to both regions' stores at once and a shard counts as
  written when both returned (acknowledged only when both regions have the data).

One store per region (:func:`testbed.storage.seaweedfs.start_store` in the region's
namespace, bound to the region's address, data under the run folder); every ``weed``
process is a Helper with a pid file in the variant's pid folder, so teardown and
``testbed clean`` stop it. The writer and the watcher are
:mod:`testbed.storage.checkpoints`. At the end every shard is read from both regions'
stores ("one bucket": the same key gives the same bytes in either region) and its
sha256 compared with what was written.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from testbed.core import layout
from testbed.errors import BringUpError, ConfigError, parse_section
from testbed.host.files import read_jsonl, write_json
from testbed.host.hosts import NetnsHost
from testbed.host.procs import Helper, wait_for
from testbed.storage import s3
from testbed.storage.checkpoints import checkpoint_key
from testbed.storage.seaweedfs import (
    BUCKET,
    MIN_VOLUMES,
    S3_PORT,
    Store,
    StoreSize,
    start_stores,
    weed_binary,
)
from topologies.params import Section
from traffic.stats import summary

MODES = ("async", "sync")
FILER_PORT = 8888  # weed server's filer (its gRPC port is this + 10000)
BIN_S = 0.5
#: seconds between starting the checkpoint processes and the run's clock, at most (the
#: probes' start and the wire sample's under software emulation)
GO_WAIT_S = 30.0
#: seconds around a fault whose shards count as "written across the fault"
AROUND_S = 3.0


class CheckpointSection(Section):
    """``backbone.checkpoints``: checkpoint shards written in ``src``, replicated to ``dst``."""

    src: str = Field(description="the region whose writer writes the shards")
    dst: str = Field(description="the region they are replicated to")
    modes: list[Literal[MODES]] = Field(  # type: ignore[valid-type]
        default_factory=lambda: list(MODES), min_length=1,
        description="one variant each: async (local ack, filer.sync) and/or sync (both ack)")
    objects: int = Field(60, description="shards written, one every interval_ms")
    size_kb: int = Field(256, description="KB a shard")
    interval_ms: float = Field(250, description="ms between shards (a fixed schedule)")
    start_s: float = Field(0, ge=0, description="s after the probes start (faults' clock)")
    drain_s: float = Field(30, ge=1, le=300,
                           description="s the async copy may lag behind after the last write")
    volume_mb: int = Field(8, description="each store's volume size")
    volumes: int = Field(24, description="each store's volume count")


def validate(section: Any, regions: set[str], where: str = "backbone.checkpoints") -> dict | None:
    """The section checked against the backbone's regions, defaults filled (pure).

    >>> validate({"src": "ra", "dst": "rb"}, {"ra", "rb"})["modes"]
    ['async', 'sync']
    >>> validate({"src": "ra", "dst": "mars"}, {"ra", "rb"})
    Traceback (most recent call last):
    ...
    testbed.errors.ConfigError: backbone.checkpoints.dst: unknown region 'mars' (known: ra, rb)
    """
    if section is None:
        return None
    parsed = parse_section(CheckpointSection, section, where)
    for end in ("src", "dst"):
        name = getattr(parsed, end)
        if name not in regions:
            raise ConfigError(f"{where}.{end}", f"unknown region {name!r} (known: "
                                                f"{', '.join(sorted(regions))})")
    if parsed.src == parsed.dst:
        raise ConfigError(f"{where}.dst", "must differ from src")
    if len(set(parsed.modes)) != len(parsed.modes):
        raise ConfigError(f"{where}.modes", f"names a mode twice: {parsed.modes}")
    for key, low, high in (("objects", 1, 1000), ("size_kb", 1, 16384), ("volume_mb", 1, 1024),
                           ("volumes", MIN_VOLUMES, 200)):
        value = getattr(parsed, key)
        if not low <= value <= high:
            raise ConfigError(f"{where}.{key}", f"must be {low}..{high}, not {value}")
    if not 0 < parsed.interval_ms <= 60000:
        raise ConfigError(f"{where}.interval_ms", f"must be above 0 and at most 60000, "
                                                  f"not {parsed.interval_ms:g}")
    cfg = parsed.model_dump()
    need_mb = 2 * cfg["objects"] * cfg["size_kb"] / 1024  # the bucket, and headroom
    if need_mb > cfg["volume_mb"] * cfg["volumes"]:
        raise ConfigError(f"{where}.volumes", f"{cfg['volumes']} x {cfg['volume_mb']} MB "
                                              f"cannot hold {need_mb:g} MB (twice the shards)")
    return cfg


def check_timing(cfg: dict, duration_s: float, where: str = "backbone.checkpoints") -> None:
    """The writes must end inside the run (``validate`` cannot know the duration)."""
    end = cfg["start_s"] + cfg["objects"] * cfg["interval_ms"] / 1000
    if end > duration_s:
        raise ConfigError(f"{where}.objects", f"{cfg['objects']} shards every "
                                              f"{cfg['interval_ms']:g} ms from "
                                              f"{cfg['start_s']:g} s end at {end:g} s, after "
                                              f"the run ({duration_s:g} s)")


def sync_argv(weed: str, src_ip: str, dst_ip: str) -> list[str]:
    """SeaweedFS's asynchronous replication of the bucket, one way (source to destination).

    >>> sync_argv("weed", "172.16.0.1", "172.16.1.1")[3:6]
    ['-a=172.16.0.1:8888', '-b=172.16.1.1:8888', '-isActivePassive']
    """
    path = f"/buckets/{BUCKET}"
    return [weed, "-logtostderr", "filer.sync", f"-a={src_ip}:{FILER_PORT}",
            f"-b={dst_ip}:{FILER_PORT}", "-isActivePassive", f"-a.path={path}",
            f"-b.path={path}"]


# figures (pure) -------------------------------------------------------------
def lags(writes: list[dict], arrivals: list[dict]) -> list[dict]:
    """Per acknowledged shard: when it was written (``t``), its write latency and its
    replication lag (arrival in the destination minus acknowledgement; never below 0,
    a synchronous write is there when acknowledged), None if it never arrived.

    >>> w = [{"key": "a", "t_start": 10.0, "t_ack": 10.5, "write_ms": 500, "ok": True,
    ...       "bytes": 4}]
    >>> lags(w, [{"key": "a", "t": 11.0, "sha256_ok": True}])[0]["lag_ms"]
    500.0
    >>> lags(w, [])[0]["lag_ms"] is None
    True
    """
    seen = {a["key"]: a for a in arrivals}
    out = []
    for w in writes:
        if not w.get("ok"):
            continue
        a = seen.get(w["key"])
        lag = None if a is None else round(max(0.0, a["t"] - w["t_ack"]) * 1000, 3)
        out.append({"key": w["key"], "t": w["t_start"], "t_ack": w["t_ack"],
                    "write_ms": w["write_ms"], "bytes": w["bytes"], "lag_ms": lag,
                    "arrived": None if a is None else a["t"],
                    "sha256_ok": None if a is None else a["sha256_ok"]})
    return out


def in_flight(rows: list[dict], t0: float, end_t: float, bin_s: float = BIN_S) -> list[list]:
    """``[s since t0, bytes acknowledged but not yet in the destination, shards so]`` per
    bin (the value at the end of the bin).

    >>> rows = [{"t_ack": 1.0, "arrived": 2.2, "bytes": 10},
    ...         {"t_ack": 1.5, "arrived": None, "bytes": 5}]
    >>> in_flight(rows, 0.0, 3.0, 1.0)
    [[1.0, 10, 1], [2.0, 15, 2], [3.0, 5, 1]]
    """
    out = []
    n = int((end_t - t0) / bin_s + 0.5)
    for k in range(1, n + 1):
        t = t0 + k * bin_s
        open_ = [r for r in rows if r["t_ack"] <= t and (r["arrived"] is None
                                                          or r["arrived"] > t)]
        out.append([round(k * bin_s, 3), sum(r["bytes"] for r in open_), len(open_)])
    return out


def around_faults(rows: list[dict], faults: list[dict], t0: float,
                  span_s: float = AROUND_S) -> list[dict]:
    """Write latency and lag of the shards written ``span_s`` before and after each fault
    (``faults``: ``fault`` and ``at_s`` from t0)."""
    out = []
    for f in faults:
        at = t0 + f["at_s"]
        before = [r for r in rows if at - span_s <= r["t"] < at]
        after = [r for r in rows if at <= r["t"] < at + span_s]
        out.append({"fault": f["fault"], "at_s": f["at_s"],
                    "lag_ms_before": _max(before, "lag_ms"), "lag_ms_after": _max(after, "lag_ms"),
                    "write_ms_before": _max(before, "write_ms"),
                    "write_ms_after": _max(after, "write_ms")})
    return out


def _max(rows: list[dict], key: str) -> float | None:
    values = [r[key] for r in rows if r[key] is not None]
    return round(max(values), 3) if values else None


def reads_agree(expected: dict[str, str], reads: dict[str, list[dict]]) -> dict:
    """"One bucket": every key read in every region returns 200 and the written sha256.

    >>> reads_agree({"k": "x"}, {"ra": [{"key": "k", "status": 200, "sha256": "x"}],
    ...                          "rb": [{"key": "k", "status": 404, "sha256": "e3"}]})
    {'keys': 1, 'consistent': 0, 'missing': {'ra': 0, 'rb': 1}, 'mismatches': {'ra': 0, 'rb': 0}}
    """
    missing = {r: 0 for r in reads}
    bad = {r: 0 for r in reads}
    good = set(expected)
    for region, records in reads.items():
        got = {x["key"]: x for x in records}
        for key, digest in expected.items():
            x = got.get(key)
            if x is None or x["status"] != 200:
                missing[region] += 1
                good.discard(key)
            elif x["sha256"] != digest:
                bad[region] += 1
                good.discard(key)
    return {"keys": len(expected), "consistent": len(good), "missing": missing,
            "mismatches": bad}


# running --------------------------------------------------------------------
class CheckpointRun:
    """Stores in both regions, the mode's replication, the writer and the watcher of one
    variant; every process on ``stack``."""

    def __init__(self, cfg: dict, mode: str, *, ns: Callable[[str], str],
                 addr: Callable[[str], str], out: Path, folder: Path, stack: ExitStack,
                 seed: int, env: dict[str, str], progress: Callable[[str], None]) -> None:
        self.cfg, self.mode, self.out, self.folder, self.stack = cfg, mode, out, folder, stack
        self.seed, self.env, self.progress = seed, env, progress
        self.src, self.dst = cfg["src"], cfg["dst"]
        self.hosts = {r: NetnsHost(ns(r)) for r in (self.src, self.dst)}
        self.ips = {r: addr(r) for r in (self.src, self.dst)}
        self.pid_dir = folder / "pids"
        self.stores: dict[str, Store] = {}
        self.writer: Helper | None = None
        self.watcher: Helper | None = None
        self.size = cfg["size_kb"] * 1024
        #: the src -> dst path when the writes start, with its propagation delay (set by
        #: the caller, who knows the routing tables)
        self.path: dict | None = None

    def endpoint(self, region: str) -> str:
        return f"http://{self.ips[region]}:{S3_PORT}"

    def start(self) -> dict:
        """Both stores (and, async, filer.sync); seconds each store took to come up."""
        data = self.folder / "stores"
        data.mkdir(parents=True, exist_ok=True)
        size = StoreSize(volume_mb=self.cfg["volume_mb"], volumes=self.cfg["volumes"])
        regions = (self.src, self.dst)
        stores = start_stores([(self.hosts[r], self.ips[r], f"store-{r}",
                                self.out / f"store-{r}.log") for r in regions],
                              folder=data, pid_dir=self.pid_dir, stack=self.stack, size=size)
        self.stores.update(zip(regions, stores, strict=True))
        if self.mode == "async":
            helper = self.hosts[self.src].spawn(
                "filer-sync", sync_argv(weed_binary(), self.ips[self.src], self.ips[self.dst]),
                pid_dir=self.pid_dir, log=self.out / layout.FILER_SYNC_LOG)
            self.stack.callback(helper.stop, 1.0)
        return {r: round(s.start_s, 2) for r, s in self.stores.items()}

    def _spawn(self, region: str, name: str, args: list[str]) -> Helper:
        argv = [sys.executable, "-m", "testbed.storage.checkpoints", *args,
                "--bucket", BUCKET, "--objects", str(self.cfg["objects"]),
                "--size", str(self.size), "--seed", str(self.seed)]
        helper = self.hosts[region].spawn(name, argv, pid_dir=self.pid_dir,
                                          log=self.out / f"{name}.log", env=self.env)
        self.stack.callback(helper.stop, 2.0)
        return helper

    def start_traffic(self, duration_s: float, go: Path) -> None:
        """The watcher in the destination, then the writer in the source, which writes
        its first shard once ``go`` exists (:meth:`go`; the watcher's time-out allows
        :data:`GO_WAIT_S` for it)."""
        self.go_file = go
        self.watcher = self._spawn(self.dst, "ckpt-watch", [
            "watch", "--endpoint", self.endpoint(self.dst),
            "--out", str(self.out / layout.CHECKPOINT_ARRIVALS),
            "--timeout", f"{duration_s + self.cfg['drain_s'] + GO_WAIT_S:g}"])
        endpoints = [self.endpoint(self.src)]
        if self.mode == "sync":
            endpoints.append(self.endpoint(self.dst))
        self.writer = self._spawn(self.src, "ckpt-write", [
            "write", *[f"--endpoint={e}" for e in endpoints],
            "--out", str(self.out / layout.CHECKPOINT_WRITES),
            "--interval", f"{self.cfg['interval_ms'] / 1000:g}", "--go", str(go)])

    def wait_ready(self) -> None:
        """Until the writer has started and waits for go (its records file exists);
        BringUpError after :data:`GO_WAIT_S`."""
        writes = self.out / layout.CHECKPOINT_WRITES
        if not wait_for(writes.exists, GO_WAIT_S, interval=0.02):
            raise BringUpError(f"the checkpoint writer did not start in {GO_WAIT_S:g} s "
                               f"(see {self.out / 'ckpt-write.log'})")

    def go(self) -> None:
        """The writer's first shard now: the run's clock has started."""
        self.go_file.touch()

    def finish(self, t0: float, duration_s: float, faults: list[dict]) -> dict:
        """Wait for the writer, let the copy drain, read every shard in both regions;
        the variant's checkpoint figures (and the timeline file)."""
        assert self.writer and self.watcher
        self.writer.wait(max(5.0, t0 + duration_s + 30 - time.time()))
        drain_t = time.time()
        self.watcher.wait(self.cfg["drain_s"] + 5)
        drained_s = round(time.time() - drain_t, 3)
        writes = list(read_jsonl(self.out / layout.CHECKPOINT_WRITES))
        arrivals = list(read_jsonl(self.out / layout.CHECKPOINT_ARRIVALS))
        rows = lags(writes, arrivals)
        keys = [checkpoint_key(i) for i in range(self.cfg["objects"])]
        expected = {w["key"]: w["sha256"] for w in writes if w.get("ok")}
        reads = {r: s3.run_in(self.hosts[r], "get", self.endpoint(r), BUCKET, *keys,
                              timeout=120) for r in (self.src, self.dst)}
        agree = reads_agree(expected, reads)
        end_t = max([t0 + duration_s] + [r["arrived"] for r in rows if r["arrived"]])
        timeline = in_flight(rows, t0, end_t)
        write_json(self.out / layout.CHECKPOINT_TIMELINE, {
            "t0": t0, "bin_s": BIN_S, "in_flight": timeline,
            "lag": [[round(r["t"] - t0, 3), r["lag_ms"]] for r in rows],
            "write": [[round(r["t"] - t0, 3), r["write_ms"]] for r in rows]})
        lag_values = [r["lag_ms"] for r in rows if r["lag_ms"] is not None]
        return {
            "mode": self.mode, "src": self.src, "dst": self.dst,
            "objects": self.cfg["objects"], "size_kb": self.cfg["size_kb"],
            "interval_ms": self.cfg["interval_ms"], "path": self.path,
            "store_start_s": {r: round(s.start_s, 2) for r, s in self.stores.items()},
            "store_resident_mb": {r: round(s.resident_mb(), 1)
                                  for r, s in self.stores.items() if s.helper.alive()},
            "written": len(rows), "write_failed": len(writes) - len(rows),
            "not_written": self.cfg["objects"] - len(writes),
            "write_ms": summary([r["write_ms"] for r in rows], (50, 99)),
            "lag_ms": summary(lag_values, (50, 99)),
            "arrived": len(lag_values),
            # the arrival lies between two listings: how far apart they were
            "watch_resolution_ms": summary([round((a["t"] - a.get("t_prev", a["t"])) * 1000, 3)
                                            for a in arrivals], (50, 99)),
            # acknowledged shards not readable in the destination at the end
            "lost": agree["missing"][self.dst],
            "not_seen_by_watcher": len(rows) - len(lag_values),
            "checksum_mismatches": (sum(1 for r in rows if r["sha256_ok"] is False)
                                    + agree["mismatches"][self.dst]),
            "one_bucket": agree,
            "drained_s": drained_s,
            "bytes_written": sum(r["bytes"] for r in rows),
            "in_flight_max_bytes": max((b for _, b, _ in timeline), default=0),
            "across_faults": around_faults(rows, faults, t0),
            "timeline": layout.CHECKPOINT_TIMELINE,
        }


# report ---------------------------------------------------------------------
def _ms(stats: dict | None, key: str) -> str:
    return "-" if not stats or stats.get(key) is None else f"{stats[key]:,.1f}"


def rows(figures: dict[str, dict]) -> list[tuple[str, ...]]:
    """One table row a variant: mode, write p50/p99, lag p50/p99/max, in flight, lost,
    mismatches, one-bucket consistent keys."""
    out = []
    for name, c in figures.items():
        lag = c["lag_ms"]
        out.append((name, c["mode"], f"{c['written']}/{c['objects']}",
                    _ms(c["write_ms"], "p50"), _ms(c["write_ms"], "p99"),
                    _ms(lag, "p50"), _ms(lag, "p99"), _ms(lag, "max"),
                    f"{c['in_flight_max_bytes'] / 1024:,.0f}", str(c["lost"]),
                    str(c["checksum_mismatches"]),
                    f"{c['one_bucket']['consistent']}/{c['one_bucket']['keys']}"))
    return out


HEADER = ("variant", "mode", "written", "write p50 ms", "write p99 ms", "lag p50 ms",
          "lag p99 ms", "lag max ms", "max in flight KB", "lost", "sha mismatches",
          "same in both regions")


def report_lines(figures: dict[str, dict], plot_file: str | None) -> list[str]:
    if not figures:
        return []
    first = next(iter(figures.values()))
    lines = ["### Cross-region checkpoint writes", "",
             f"{first['objects']} shards of {first['size_kb']} KB, one every "
             f"{first['interval_ms']:g} ms, written in {first['src']} and replicated to "
             f"{first['dst']} over the backbone: async = acknowledged by the local store, "
             "migrated by SeaweedFS filer.sync; sync = acknowledged when both regions' "
             "stores returned. Lag = arrival in the destination (polled every 100 ms) "
             "minus the acknowledgement (0 when it was seen before; a sync write is "
             "there when acknowledged). Every shard is read back from both regions' "
             "stores at the end and its sha256 compared.", "",
             "| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    lines += ["| " + " | ".join(r) + " |" for r in rows(figures)]
    lines.append("")
    for name, c in figures.items():
        res = c.get("watch_resolution_ms")
        if res:
            lines.append(f"- {name}: the watcher saw a shard within {res['p50']:,.0f} ms "
                         f"(p50; p99 {res['p99']:,.0f} ms) of its arrival: the lag's resolution"
                         + (" (a sync shard is in the destination when acknowledged: its lag "
                            "column measures only this resolution)" if c["mode"] == "sync"
                            else ""))
        if c.get("path"):
            lines.append(f"- {name}: {c['src']} -> {c['dst']} over "
                         f"{' - '.join(c['path']['nodes'])}, one-way propagation delay "
                         f"{c['path']['one_way_ms']:g} ms (before any fault)")
        for f in c["across_faults"]:
            lines.append(f"- {name}: {f['fault']} at {f['at_s']:g} s: write max "
                         f"{_cell(f['write_ms_before'])} ms before, "
                         f"{_cell(f['write_ms_after'])} ms after; lag max "
                         f"{_cell(f['lag_ms_before'])} ms before, "
                         f"{_cell(f['lag_ms_after'])} ms after")
    lines.append("")
    if plot_file:
        lines += [f"![checkpoint replication]({plot_file})", ""]
    return lines


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"


def table(figures: dict[str, dict]) -> str:
    """The checkpoint rows as plain text for the terminal."""
    all_rows = [HEADER, *rows(figures)]
    widths = [max(len(r[i]) for r in all_rows) for i in range(len(HEADER))]
    lines = ["  ".join(c.ljust(w) if i < 2 else c.rjust(w)
                       for i, (c, w) in enumerate(zip(r, widths, strict=True)))
             for r in all_rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def plot(entries: list[dict], folder_of: Callable[[dict], Path], out: Path) -> Path | None:
    """``checkpoint_lag.png``: per variant, write latency and replication lag of each
    shard and the bytes in flight over time, faults marked."""
    done = [e for e in entries if e.get("checkpoints")]
    if not done:
        return None
    from testbed.reports.plots import plt, save

    fig, axes = plt.subplots(len(done), 1, figsize=(10, 2.8 * len(done)), squeeze=False,
                             sharex=True)
    for ax, entry in zip(axes[:, 0], done, strict=True):
        data = json.loads((folder_of(entry) / entry["checkpoints"]["timeline"]).read_text())
        ax.plot([t for t, v in data["write"]], [v for t, v in data["write"]], ".",
                ms=3, color="tab:blue", label="write latency ms")
        lag = [(t, v) for t, v in data["lag"] if v is not None]
        ax.plot([t for t, _ in lag], [v for _, v in lag], ".", ms=3, color="tab:orange",
                label="replication lag ms")
        ax.set_yscale("symlog", linthresh=10)
        ax.set_ylabel("ms")
        twin = ax.twinx()
        twin.plot([t for t, _, _ in data["in_flight"]],
                  [b / 1024 for _, b, _ in data["in_flight"]], lw=1, color="tab:gray",
                  label="in flight KB")
        twin.set_ylabel("in flight KB")
        for f in entry["failovers"] + entry["restores"]:
            color = "tab:green" if f["action"].startswith("restore") else "tab:red"
            ax.axvline(f["at_s"], color=color, ls="--", lw=0.8)
        ax.set_title(f"{entry['name']}: {entry['checkpoints']['mode']}", fontsize=9)
        ax.legend(loc="upper left", fontsize=7)
    axes[-1, 0].set_xlabel("seconds since probes started")
    return save(fig, out / layout.CHECKPOINT_LAG_PLOT)
