"""Storage pieces that need no root: bad input, the cache's config and counts."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from testbed.errors import ConfigError
from testbed.storage.cache import check_budget, read_counts, render
from testbed.storage.seaweedfs import StoreSize, private_tmp, weed_argv


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"volume_mb": -1}, "storage.store.volume_mb"),
    ({"volumes": 0}, "storage.store.volumes"),
])
def test_impossible_store_sizes_name_their_field(kwargs, field):
    from testbed.experiments.storage.schema import validate

    with pytest.raises(ConfigError) as err:
        validate({"store": kwargs})
    assert err.value.field == field


def test_the_store_size_is_the_scenarios_store_section():
    from testbed.experiments.storage.schema import validate

    size = validate({"store": {"volume_mb": 8, "volumes": 20}}).store
    assert isinstance(size, StoreSize) and size.capacity_mb == 160
    assert "-volume.max=20" in weed_argv("weed", "10.0.0.9", Path("/d"), size)


def test_a_cache_larger_than_the_disk_budget_is_refused():
    with pytest.raises(ConfigError, match="larger than the node's disk budget") as err:
        check_budget(2048, 1024)
    assert err.value.field == "storage.cache_mb"
    check_budget(1024, 1024)


def test_store_binds_to_the_lab_address_only_and_keeps_its_sockets_private():
    argv = private_tmp(weed_argv("weed", "10.0.0.9", Path("/run/testbed/1a2b/s"), StoreSize()))
    assert argv[:3] == ["unshare", "--mount", "--propagation"]
    assert "-ip.bind=10.0.0.9" in argv and "-dir=/run/testbed/1a2b/s" in argv
    assert "-volume.max=16" in argv and "-master.volumeSizeLimitMB=32" in argv


def test_cache_config_keeps_its_files_in_its_folder_and_its_logs_in_the_results():
    text = render(Path("/run/testbed/1a2b/cache"), "10.0.0.9:8333", 64, "127.0.0.1:8080",
                  Path("/results/x/cache"))
    paths = [w.rstrip(";") for w in text.split() if w.startswith("/") and w != "/"]
    logs = [p for p in paths if p.startswith("/results/x/cache/")]
    assert sorted(logs) == ["/results/x/cache/access.jsonl", "/results/x/cache/error.log"]
    assert all(p.startswith("/run/testbed/1a2b/cache/") for p in paths if p not in logs)
    assert "listen 127.0.0.1:8080;" in text


def test_bytes_per_source_follow_the_verdicts():
    counts = read_counts([{"cache": "MISS", "bytes": 5}, {"cache": "EXPIRED", "bytes": 5},
                          {"cache": "HIT", "bytes": 5}])
    assert (counts["misses"], counts["bytes_from_store"], counts["bytes_from_cache"]) == (2, 10, 5)


REPO = Path(__file__).resolve().parents[2]


def test_the_scenario_validates():
    from testbed.core.cli import main

    assert main(["validate", str(REPO / "scenarios" / "storage-cache.yaml")]) == 0


@pytest.mark.parametrize(("change", "message"), [
    ({"objects": {"sizes_kb": [16, -64]}},
     "storage.objects.sizes_kb[1]: must be greater than 0, got -64"),
    ({"cache_mb": 512}, "storage.cache_mb: 512 MB is larger than the node's disk budget of "
                        "256 MB"),
    ({"readers": [1, 16]}, "storage.readers[1]: 16 readers, but only 8 GPU nodes"),
    ({"gpu_nodes": 2, "gpu_leaves": 3, "readers": [1]},
     "storage.gpu_leaves: 3 leaves for 2 GPU nodes: a leaf without nodes"),
    ({"store": {"volume_mb": 64, "volumes": 8}},
     "storage.store.volumes: must be 14 or more, got 8"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, change, message):
    import yaml

    from testbed.core.cli import main

    data = yaml.safe_load((REPO / "scenarios" / "storage-cache.yaml").read_text())
    data["storage"].update(change)
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    assert main(["validate", str(path)]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"testbed: error: {message}"]


def test_a_host_without_weed_or_nginx_is_refused_before_anything_starts(monkeypatch):
    from testbed.errors import HostError
    from testbed.experiments.storage.run import StorageExperiment
    from testbed.storage import cache

    experiment = StorageExperiment({"storage": {}}, name="s", seed=1, seeds=(1,),
                                   duration_s=5)
    monkeypatch.setattr(cache.shutil, "which", lambda *a, **k: None)
    with pytest.raises(HostError, match="apt-get install nginx"):
        experiment.check_host(None)


def test_the_storage_node_sits_alone_behind_its_own_leaf():
    from testbed.experiments.storage.run import STORAGE_NODE, gpu_names, storage_topology
    from testbed.experiments.storage.schema import validate
    from topologies.build import build_topology

    section = validate({})
    spec = build_topology(storage_topology(section), "tbdemo")
    assert spec.counts() == {"switches": 5, "hosts": 9, "links": 15}
    store = spec.host("tbdemo" + STORAGE_NODE)
    leaf = store.interface(0, 0).switch
    assert [h.name for h in spec.hosts if h.interface(0, 0).switch == leaf] == [store.name]
    gpus = [spec.host("tbdemo" + name) for name in gpu_names(section)]
    assert len(gpus) == 8 and store not in gpus
    assert {g.interface(0, 0).switch for g in gpus} == {"tbdemol1", "tbdemol2"}


def _experiment(change: dict | None = None):
    import yaml

    from testbed.experiments.storage.run import StorageExperiment

    data = yaml.safe_load((REPO / "scenarios" / "storage-cache.yaml").read_text())
    data["storage"].update(change or {})
    return StorageExperiment({"storage": data["storage"]}, name="s", seed=1, seeds=(1,),
                             duration_s=5)


def _free(monkeypatch, mb: float) -> None:
    from testbed.experiments.storage import run as storage

    monkeypatch.setattr(storage, "weed_binary", lambda: "weed")
    monkeypatch.setattr(storage, "nginx_binary", lambda: "nginx")
    usage = shutil.disk_usage("/")._replace(free=int(mb * 2**20))
    monkeypatch.setattr(storage.shutil, "disk_usage", lambda path: usage)


def test_the_scenario_fits_the_run_folder_of_a_4_gb_lab_vm(monkeypatch):
    _free(monkeypatch, 400)  # Debian sizes /run (a tmpfs) at 10 % of RAM
    _experiment().check_host(None)


@pytest.mark.parametrize(("change", "field"), [
    ({"cache_mb": 256, "objects": {"keys": 2000, "sizes_kb": [64]}}, "storage.cache_mb"),
    ({"gpu_nodes": 1, "readers": [1], "gpu_leaves": 1, "objects": {"keys": 6000},
      "store": {"volume_mb": 64, "volumes": 16}},
     "storage.objects"),
])
def test_data_beyond_the_run_folders_free_space_is_refused_before_anything_starts(
        monkeypatch, change, field):
    _free(monkeypatch, 400)
    with pytest.raises(ConfigError, match=r"which has 400 MB free \(a tmpfs") as err:
        _experiment(change).check_host(None)
    assert err.value.field == field


def test_a_reader_counts_only_objects_and_reports_its_wall_clock_span():
    """Error replies carry a body too: it is no object read. start/end are wall-clock
    times, so readers that started one after the other share one span."""
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from testbed.storage.s3 import read_load
    from traffic.object_reads import KeyPicker, key_name

    class Objects(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            found = self.path.endswith(key_name(0))
            body = bytes(1000) if found else b"<Error>NoSuchKey</Error>" * 10
            self.send_response(200 if found else 404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Objects)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        before = time.time()
        got = read_load(f"http://127.0.0.1:{server.server_port}", "b", KeyPicker(2, 0.0, 1),
                        0.3)
    finally:
        server.shutdown()
        server.server_close()
    assert got["reads"] > 0 and got["errors"] > 0
    assert got["bytes"] == 1000 * got["reads"]
    assert before <= got["start"] < got["end"] <= time.time()


def test_a_cache_that_exits_names_its_log_which_outlives_the_run(tmp_path, monkeypatch):
    """nginx's config passes its check, then nginx exits: the error names the cache's
    error.log, which is in the results and still there once the run's folder is gone."""
    from contextlib import ExitStack

    from testbed.errors import BringUpError
    from testbed.host.hosts import Host
    from testbed.storage import cache

    class Stub(Host):
        """Runs a stand-in for nginx: its check passes, the server says why and exits."""

        name = "stub"

        def argv(self, argv):
            code = 0 if "-t" in argv else 1
            return ["sh", "-c", f"echo 'nginx: [emerg] no room' >&2; exit {code}"]

    monkeypatch.setattr(cache, "nginx_binary", lambda: "nginx")
    run, results = tmp_path / "run", tmp_path / "results"
    with ExitStack() as stack, pytest.raises(BringUpError) as err:
        cache.start_cache(Stub(), "10.0.0.9:8333", folder=run, pid_dir=run, stack=stack,
                          max_mb=16, logs=results, name="cache-0")
    log = results / "cache-0" / "error.log"
    assert str(err.value) == f"cache on stub exited (see {log})"
    assert not (run / "cache-0").exists()
    assert "no room" in log.read_text()


def test_a_store_that_exits_fails_at_once_with_its_log(tmp_path, monkeypatch):
    """weed exits at start: no minute-long wait for readiness, and the error quotes the
    end of its log."""
    import time
    from contextlib import ExitStack

    from testbed.errors import BringUpError
    from testbed.host.hosts import Host
    from testbed.storage import seaweedfs

    class Stub(Host):
        """The store's command says why and exits; the S3 client runs as it is."""

        name = "stub"

        def argv(self, argv):
            if argv[0] == "unshare":
                return ["sh", "-c", "echo 'F1201 volume: no space left' >&2; exit 1"]
            return list(argv)

    monkeypatch.setattr(seaweedfs, "weed_binary", lambda: "weed")
    log = tmp_path / "store.log"
    t0 = time.monotonic()
    with ExitStack() as stack, pytest.raises(BringUpError) as err:
        seaweedfs.start_store(Stub(), "127.0.0.9", folder=tmp_path / "run",
                              pid_dir=tmp_path / "run", stack=stack, log=log)
    assert time.monotonic() - t0 < 10
    assert str(err.value) == (f"store on stub exited 1 before it was ready; {log} ends: "
                              "F1201 volume: no space left")


def test_the_retriever_and_the_caches_count_the_same_reads_as_hits():
    from testbed.experiments.storage.run import read_entry

    verdicts = ["MISS", "HIT", "STALE", "REVALIDATED", "UPDATING", "EXPIRED", "BYPASS"]
    retriever = [{"status": 200, "cache": v, "seconds": 0.01, "bytes": 8} for v in verdicts]
    counts = read_counts(retriever)
    assert read_entry(retriever)["hit_ratio"] == counts["hit_ratio"] == round(4 / 7, 3)


def test_the_report_says_whose_reads_each_hit_ratio_covers():
    from testbed.experiments.storage.run import StorageExperiment, cache_entry, read_entry

    reads = read_entry([{"status": 200, "cache": "HIT", "seconds": 0.002}])
    caches = cache_entry([[{"cache": "MISS", "bytes": 1}, {"cache": "HIT", "bytes": 1},
                           {"cache": "HIT", "bytes": 1}]], [1])
    storage = {"claimed_speedup": 8.0, "speedup": None, "hit_speedup": None, "variants": {
        "cached": {"reads": reads, "caches": caches, "throughput": []}}}
    text = "\n".join(StorageExperiment.report_section({"storage": storage}, Path(".")))
    assert "| variant | retriever reads | hit ratio |" in text
    assert ("The caches of `cached` served 3 reads: 1 (hit ratio 0.00) of the retriever "
            "(the table's), 2 (hit ratio 1.00) of the throughput step.") in text


def test_a_cache_read_while_nginx_writes_skips_the_torn_last_line(tmp_path):
    from testbed.storage.cache import ACCESS_LOG, Cache

    (tmp_path / ACCESS_LOG).write_text('{"cache": "HIT", "bytes": 5}\n{"cache": "MI')
    cache = Cache(host=None, helper=None, folder=tmp_path, listen="127.0.0.1:8080",
                  logs=tmp_path)
    assert cache.reads() == [{"cache": "HIT", "bytes": 5}]
