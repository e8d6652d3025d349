"""The lab's S3 store and a node-local cache on a real fabric.

A 1-plane leaf-spine of 4 nodes (2 leaves, 2 spines, 100 Mb/s): the store (SeaweedFS)
on node 0, the reader on node 3 behind the other leaf, so every store byte crosses
leaf, spine and leaf. Objects go in and come back with their checksum; the reader's
nginx cache serves a second read itself, proven by the store's own byte counter and the
switch port toward the reader, which do not grow on the hit. After teardown no store or
cache process and nothing of the run is left; nor after a run stopped by Ctrl-C, or
killed and then cleaned.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.host.procs import python_env, wait_for

from .conftest import small_fabric

pytestmark = [pytest.mark.ovs, pytest.mark.shares_host]

SIZE = 256 * 1024
#: objects the chains' retriever reads, and their size
KEYS, CHAIN_OBJECT = 20, 64 * 1024
#: bytes a hit may add on the reader's switch port: ARP, TCP of the metrics read, not the object
NOISE = 16 * 1024


@pytest.fixture(scope="module")
def lab(tmp_path_factory) -> Iterator[dict]:
    from testbed.storage.cache import start_cache
    from testbed.storage.seaweedfs import S3_PORT, start_store

    pids = []
    with small_fabric(tmp_path_factory, "storage", planes=1, link_mbps=100) as (live, stack):
        node = live.spec.hosts[0]
        store = start_store(live.fabric.host(node.name), node.interface(0, 0).ip,
                            folder=live.pid_dir / "storage", pid_dir=live.pid_dir,
                            stack=stack, log=live.out / "store.log")
        reader = live.fabric.host(live.spec.hosts[-1].name)
        cache = start_cache(reader, f"{store.ip}:{S3_PORT}", folder=live.pid_dir / "storage",
                            pid_dir=live.pid_dir, stack=stack, max_mb=64, logs=live.out)
        pids += [store.helper.pid, cache.helper.pid]
        measures = {"store_start_s": round(store.start_s, 2),
                    "store_resident_mb": round(store.resident_mb(), 1)}
        up = {"live": live, "stack": stack, "store": store, "cache": cache, "pids": pids,
              "reader": reader, "measures": measures}
        yield up
        (live.out / "measures.json").write_text(json.dumps(measures, indent=1))
        print("storage measures:", json.dumps(measures))
    for pid in pids:  # stopped and reaped: no process, not even a zombie
        assert not Path(f"/proc/{pid}").exists(), pid


def reader_port_bytes(up: dict) -> int:
    """Egress bytes of the switch port toward the reader: every byte it is sent."""
    live = up["live"]
    port = next(lk.b_intf for lk in live.spec.links
                if lk.kind == "host" and lk.a == up["reader"].name)
    return live.fabric.queue_stats()[port]["bytes"]


def test_store_is_sized_and_answers(lab):
    from testbed.storage.seaweedfs import READY_S

    assert 0 < lab["store"].start_s < READY_S
    assert lab["measures"]["store_resident_mb"] < 400


def test_objects_put_and_got_back_through_the_fabric(lab):
    from testbed.storage import s3

    store, reader = lab["store"], lab["reader"]
    keys = [f"obj{i}" for i in range(4)]
    put = s3.run_in(reader, "put", store.endpoint, "objects", *keys, "--size", str(SIZE),
                    "--seed", "7")
    assert [p["status"] for p in put] == [200] * 4
    before = reader_port_bytes(lab)
    got = s3.run_in(reader, "get", store.endpoint, "objects", *keys)
    assert [g["status"] for g in got] == [200] * 4
    assert [g["sha256"] for g in got] == [p["sha256"] for p in put]
    assert [g["sha256"] for g in got] == [s3.sha256(s3.object_bytes(k, SIZE, 7)) for k in keys]
    assert reader_port_bytes(lab) - before >= 4 * SIZE  # through the switches, not around
    lab["measures"]["store_get_ms"] = round(1000 * min(g["seconds"] for g in got), 2)


def test_second_read_is_a_hit_served_by_the_node(lab):
    from testbed.storage import s3

    store, reader, cache = lab["store"], lab["reader"], lab["cache"]
    assert s3.run_in(reader, "put", store.endpoint, "objects", "hot", "--size", str(SIZE),
                     "--seed", "3")[0]["status"] == 200
    want = s3.sha256(s3.object_bytes("hot", SIZE, 3))

    sent0 = store.bytes_sent(reader)
    port0 = reader_port_bytes(lab)
    (miss,) = s3.run_in(reader, "get", cache.endpoint, "objects", "hot")
    port1 = reader_port_bytes(lab)
    sent1 = store.bytes_sent(reader)
    port1b = reader_port_bytes(lab)  # after the metrics read, which crosses the port too
    (hit,) = s3.run_in(reader, "get", cache.endpoint, "objects", "hot")
    port2 = reader_port_bytes(lab)
    sent2 = store.bytes_sent(reader)

    assert (miss["status"], miss["cache"], miss["sha256"]) == (200, "MISS", want)
    assert (hit["status"], hit["cache"], hit["sha256"]) == (200, "HIT", want)
    assert sent1 - sent0 == SIZE and sent2 == sent1  # the store sent the object once
    assert port1 - port0 >= SIZE and port2 - port1b < NOISE  # the hit crossed no switch
    assert cache.counts() == {"reads": 2, "hits": 1, "misses": 1, "hit_ratio": 0.5,
                              "bytes_from_cache": SIZE, "bytes_from_store": SIZE}
    lab["measures"].update(miss_ms=round(1000 * miss["seconds"], 2),
                           hit_ms=round(1000 * hit["seconds"], 2),
                           hit_port_bytes=port2 - port1b)
    assert hit["seconds"] < miss["seconds"]


def test_chains_whose_retriever_reads_through_the_cache(lab, tmp_path):
    """Agent chains for a few seconds, the retriever on the reading node: each retriever
    hop reads a Zipf-popular object through the node's cache; hot keys hit."""
    from contextlib import ExitStack

    from testbed.storage import s3
    from testbed.workloads.chains import Service, start_driver, start_services
    from traffic.object_reads import key_name
    from traffic.stats import summary

    live, store, reader, cache = lab["live"], lab["store"], lab["reader"], lab["cache"]
    keys = [key_name(i) for i in range(KEYS)]
    put = s3.run_in(reader, "put", store.endpoint, "objects", *keys, "--size",
                    str(CHAIN_OBJECT))
    assert {p["status"] for p in put} == {200}
    before = cache.counts()
    hosts = [live.fabric.host(h.name) for h in live.spec.hosts]
    ips = [h.interface(0, 0).ip for h in live.spec.hosts]
    where = {"retriever": Service(reader, [ips[-1]]), "tool": Service(hosts[1], [ips[1]]),
             "model": Service(hosts[2], [ips[2]]), "agent": Service(hosts[1], [ips[1]])}
    reads = tmp_path / "reads.jsonl"
    with ExitStack() as stack:
        start_services(where, out=tmp_path, pid_dir=live.pid_dir, stack=stack, extra={
            "retriever": ["--objects", f"{cache.endpoint}/objects", "--keys", str(KEYS),
                          "--zipf", "1.0", "--seed", "1", "--reads-out", str(reads)]})
        driver = start_driver(hosts[1], out=tmp_path, pid_dir=live.pid_dir, duration_s=6,
                              seed=1, concurrency=2, timeout_ms=5000, stack=stack)
        assert driver.wait(60) == 0
    chains = [json.loads(line) for line in (tmp_path / "chains.jsonl").read_text().splitlines()]
    records = [json.loads(line) for line in reads.read_text().splitlines()]
    stats = json.loads((tmp_path / "service-retriever.json").read_text())

    assert chains and all(c["ok"] for c in chains)
    assert records and {r["status"] for r in records} == {200}
    assert {r["bytes"] for r in records} == {CHAIN_OBJECT}
    assert stats["object_reads"] == len(records) and stats["object_errors"] == 0
    hits = [1000 * r["seconds"] for r in records if r["cache"] == "HIT"]
    misses = [1000 * r["seconds"] for r in records if r["cache"] == "MISS"]
    assert len(misses) <= KEYS and hits  # a key misses once, then it is the node's
    after = cache.counts()
    assert after["reads"] - before["reads"] == len(records)
    assert after["hits"] - before["hits"] == len(hits)
    hit_ms, miss_ms = summary(hits), summary(misses)
    assert hit_ms["p50"] < miss_ms["p50"]
    lab["measures"]["chains"] = {
        "chains": len(chains), "reads": len(records),
        "hit_ratio": round(len(hits) / len(records), 3),
        "read_hit_ms": {k: round(hit_ms[k], 2) for k in ("p50", "p99")},
        "read_miss_ms": {k: round(miss_ms[k], 2) for k in ("p50", "p99")},
        "chain_ms": {k: round(v, 2) for k, v in summary(
            [c["latency_ms"] for c in chains]).items() if k in ("p50", "p99")}}


def test_a_second_cache_on_a_taken_port_is_refused_naming_its_kept_log(lab, tmp_path):
    """A cache is up when nginx listens, not when its config check passed: a second
    cache on the reader's port fails to start, and the error names its error.log, which
    is in the results and outlives the cache's folder."""
    from contextlib import ExitStack

    from testbed.errors import BringUpError
    from testbed.storage.cache import start_cache

    live, store = lab["live"], lab["store"]
    with ExitStack() as stack, pytest.raises(BringUpError) as err:
        start_cache(lab["reader"], f"{store.ip}:8333", folder=live.pid_dir / "storage",
                    pid_dir=live.pid_dir, stack=stack, max_mb=16, logs=tmp_path,
                    name="cache-busy")
    log = tmp_path / "cache-busy" / "error.log"
    assert str(err.value).endswith(f"(see {log})")
    assert not (live.pid_dir / "storage" / "cache-busy").exists()
    assert "Address already in use" in log.read_text()


def running(pid: int) -> bool:
    """Whether ``pid`` runs: exists and is no zombie (an orphan waits for init to reap it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


#: a run in a process of its own: a 2-node fabric, a store and a cache, then it waits to be
#: stopped
RUN = """
import sys, time
from contextlib import ExitStack
from pathlib import Path
from testbed.fabric.bringup import bring_up
from testbed.host.capabilities import probe
from testbed.host.naming import new_run_id, run_prefix
from testbed.storage.cache import start_cache
from testbed.storage.seaweedfs import start_store
from topologies.leafspine import build_fabric

out, run_id = Path(sys.argv[1]), new_run_id()
spec = build_fabric(prefix=run_prefix(run_id), nodes=2, leaves_per_plane=1,
                    spines_per_plane=1)
with ExitStack() as stack:
    live = bring_up(spec, probe(run_id), run_id=run_id, controller={"mode": "ecmp"},
                    out=out, stack=stack)
    node = spec.hosts[0]
    store = start_store(live.fabric.host(node.name), node.interface(0, 0).ip,
                        folder=live.pid_dir / "storage", pid_dir=live.pid_dir, stack=stack,
                        log=out / "store.log")
    cache = start_cache(live.fabric.host(spec.hosts[1].name), f"{store.ip}:8333",
                        folder=live.pid_dir / "storage", pid_dir=live.pid_dir, stack=stack,
                        max_mb=16, logs=out)
    print(run_id, store.helper.pid, cache.helper.pid, store.data, flush=True)
    time.sleep(120)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_store_does_not_outlive_a_stopped_run(tmp_path, sig):
    """Ctrl-C: the run's own teardown stops store and cache; SIGKILL: they outlive the
    run until ``testbed clean`` (of that run alone) stops them and removes the data."""
    from testbed.host.cleanup import clean
    from testbed.host.naming import run_prefix

    from .conftest import leftovers, sigint_default

    proc = subprocess.Popen([sys.executable, "-c", RUN, str(tmp_path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=python_env(),
                            preexec_fn=sigint_default)
    try:
        line = proc.stdout.readline().split()
        assert len(line) == 4, proc.communicate(timeout=60)[1][-2000:]
        run_id, pids, data = line[0], [int(line[1]), int(line[2])], Path(line[3])
        assert data.is_dir() and all(map(running, pids))
        proc.send_signal(sig)
        proc.wait(60)
        if sig == signal.SIGKILL:
            assert all(map(running, pids))  # a SIGKILL runs no teardown
            removed, _ = clean(only={run_id})
            assert {f"process {pid}" for pid in pids} <= set(removed)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert wait_for(lambda: not any(map(running, pids)), 5)
    assert not data.exists()
    # the cache's logs are the results', not the run's: they stay
    assert (tmp_path / "cache" / "error.log").exists()
    assert (tmp_path / "cache" / "access.jsonl").exists()
    assert leftovers(run_prefix(run_id)) == []
