"""A node-local object cache on a reading node: nginx's ``proxy_cache`` in front of S3.

Readers on the node ask ``http://127.0.0.1:PORT/BUCKET/KEY``; nginx answers from its
cache folder (a hit, no byte crosses the fabric) or fetches the object from the store
through the switches, keeps it and answers (a miss). Why nginx: it is the cache in
front of object stores that operators know (the usual S3 and CDN edge cache), one
Debian package, and its cache is bounded by a byte budget (``max_size``, least recently
used objects go first): the node's disk budget. It says per read whether it hit
(``$upstream_cache_status``, sent as a header and written to its access log), so the
lab counts hits, misses and bytes per source from the cache's own records.
SeaweedFS's own remote caching (``remote.mount``/``remote.cache``) was the other
choice: a second master, volume server and filer on every GPU node (some 110 MB and a
Go runtime per node on a 2-core host), and caching by explicit command rather than on
read.

The config is ``nginx.conf.tmpl`` beside this module, checked with ``nginx -t`` before
nginx starts; nginx runs in the foreground, its processes in one process group (the
master, one worker, and for ``proxy_cache_path`` the cache manager and, a minute after
start and briefly, the cache loader), a :class:`Helper` with a pid file in the run's pid
folder. Its folder (cache, temp files) lies in the run folder and goes with the run, its
logs (``error.log``, and ``access.jsonl``: one JSON object a request) go to a folder of
the results and stay.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from string import Template

from testbed.errors import BringUpError, ConfigError, HostError
from testbed.host.files import read_jsonl
from testbed.host.hosts import Host
from testbed.host.procs import Helper, wait_for
from traffic.object_reads import CACHE_HEADER

CACHE_PORT = 8080
TEMPLATE = Path(__file__).with_name("nginx.conf.tmpl")
ACCESS_LOG = "access.jsonl"  # nginx's access log: one JSON object per request
ERROR_LOG = "error.log"
#: nginx's own pid file: the server writes it once it listens (``nginx -t`` writes it
#: too, and leaves it: removed before the server starts)
MASTER_PID = "nginx-master.txt"
#: what the cache's verdicts mean for where the bytes came from
FROM_CACHE = ("HIT", "STALE", "REVALIDATED", "UPDATING")


def check_budget(cache_mb: float, disk_mb: float, field: str = "storage.cache_mb") -> None:
    """ConfigError unless the cache is positive and fits the node's disk budget.

    >>> check_budget(64, 128)
    >>> check_budget(256, 128)
    Traceback (most recent call last):
    testbed.errors.ConfigError: storage.cache_mb: 256 MB is larger than the node's disk \
budget of 128 MB
    >>> check_budget(-1, 128)
    Traceback (most recent call last):
    testbed.errors.ConfigError: storage.cache_mb: must be positive, not -1
    """
    if cache_mb <= 0:
        raise ConfigError(field, f"must be positive, not {cache_mb:g}")
    if cache_mb > disk_mb:
        raise ConfigError(field, f"{cache_mb:g} MB is larger than the node's disk budget of "
                                 f"{disk_mb:g} MB")


def render(folder: Path, store: str, max_mb: int, listen: str, logs: Path) -> str:
    """The nginx config of one cache: ``store`` is the S3 endpoint's ``host:port``, cache
    and temp files in ``folder``, the logs in ``logs``.

    >>> text = render(Path("/c"), "10.0.0.9:8333", 64, "127.0.0.1:8080", Path("/out/c"))
    >>> "proxy_pass http://10.0.0.9:8333;" in text, "max_size=64m" in text
    (True, True)
    >>> "$upstream_cache_status" in text, "access_log /out/c/access.jsonl reads;" in text
    (True, True)
    >>> "add_header X-Cache-Status $upstream_cache_status always;" in text
    True
    """
    return Template(TEMPLATE.read_text()).substitute(
        folder=folder, store=store, max_mb=max_mb, listen=listen, logs=logs,
        cache_header=CACHE_HEADER)


def read_counts(records: Iterable[dict]) -> dict:
    """Hits, misses, hit ratio and bytes per source of a cache's read records; a hit is
    a read served from the cache (``FROM_CACHE``), every other verdict a miss.

    >>> read_counts([{"cache": "MISS", "bytes": 10}, {"cache": "HIT", "bytes": 10},
    ...              {"cache": "HIT", "bytes": 10}, {"cache": "", "bytes": 3}])
    {'reads': 3, 'hits': 2, 'misses': 1, 'hit_ratio': 0.667, 'bytes_from_cache': 20, \
'bytes_from_store': 10}

    Requests the cache did not consider (a PUT: empty verdict) are not reads.
    """
    hits = misses = from_cache = from_store = 0
    for r in records:
        if r["cache"] in FROM_CACHE:
            hits += 1
            from_cache += r["bytes"]
        elif r["cache"]:
            misses += 1
            from_store += r["bytes"]
    reads = hits + misses
    return {"reads": reads, "hits": hits, "misses": misses,
            "hit_ratio": round(hits / reads, 3) if reads else None,
            "bytes_from_cache": from_cache, "bytes_from_store": from_store}


@dataclass
class Cache:
    """A running cache on a node; ``endpoint`` is what the node's readers ask."""

    host: Host
    helper: Helper
    folder: Path
    listen: str
    #: where its logs stay (in the results)
    logs: Path

    @property
    def endpoint(self) -> str:
        return f"http://{self.listen}"

    def reads(self) -> list[dict]:
        """The cache's records of every request so far (nginx writes one at its end)."""
        return list(read_jsonl(self.logs / ACCESS_LOG))

    def counts(self) -> dict:
        return read_counts(self.reads())


def nginx_binary() -> str:
    found = shutil.which("nginx") or shutil.which("nginx", path="/usr/sbin")
    if not found:
        raise HostError("nginx is missing: apt-get install nginx (make setup)")
    return found


def start_cache(host: Host, store: str, *, folder: Path, pid_dir: Path, stack: ExitStack,
                max_mb: int, logs: Path, name: str = "cache",
                listen: str = f"127.0.0.1:{CACHE_PORT}") -> Cache:
    """Start a cache in ``host`` in front of the store at ``store`` (``ip:port``), its
    files under ``folder/name`` (made, and removed again by ``stack``), its logs in
    ``logs/name`` (kept: ``logs`` is a results folder); returns once it listens."""
    nginx = nginx_binary()
    own, kept = folder / name, logs / name
    for sub in ("objects", "tmp"):
        (own / sub).mkdir(parents=True)
    stack.callback(shutil.rmtree, own, ignore_errors=True)
    kept.mkdir(parents=True, exist_ok=True)
    error_log = kept / ERROR_LOG
    conf = own / "nginx.conf"
    conf.write_text(render(own, store, max_mb, listen, kept))
    argv = [nginx, "-p", str(own), "-c", str(conf), "-e", str(error_log)]
    checked = host.run([*argv, "-t", "-q"])
    if checked.returncode:
        raise BringUpError(f"cache on {host.name}: nginx -t: {checked.stderr.strip()[-300:]}")
    (own / MASTER_PID).unlink(missing_ok=True)
    helper = host.spawn(name, argv, pid_dir=pid_dir, log=error_log)
    stack.callback(helper.stop)
    if not wait_for(lambda: (own / MASTER_PID).exists() or not helper.alive(), 10):
        raise BringUpError(f"cache on {host.name} did not listen in 10 s (see {error_log})")
    if not helper.alive():
        raise BringUpError(f"cache on {host.name} exited (see {error_log})")
    return Cache(host=host, helper=helper, folder=own, listen=listen, logs=kept)
