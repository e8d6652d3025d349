"""A Prometheus server of the lab's own (Debian's ``prometheus``), started with it on
request (``testbed up --monitor``): its configuration and database in the run folder,
listening on 127.0.0.1 only, scraping the lab's monitor every second, stopped and removed
with the lab. Its samples can be kept: at the teardown, once it has stopped, its database
is copied into the results folder, which ``prometheus --storage.tsdb.path=COPY`` serves
again later.

It runs without the admin API (a web page in a browser on the same machine could
otherwise POST to it: delete series, take snapshots) and answers cross-origin requests
for its own origin only (Prometheus's default allows every origin).
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import urllib.error
import urllib.parse
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import yaml

from testbed.core import layout
from testbed.errors import BringUpError, ConfigError
from testbed.host.procs import Helper, wait_for

BINARY = "prometheus"
READY_TIMEOUT_S = 60  # a first start under software emulation (the lab VM) is slow
#: how long it may take to close its database at the teardown (then it is killed, and
#: the copy holds what its write-ahead log had on disk)
STOP_GRACE_S = 20
SCRAPE_S = 1
#: what a copy of the database leaves out: the lock and the queries then running
NOT_KEPT = ("lock", "queries.active")


@dataclass(frozen=True)
class Server:
    url: str
    port: int
    pid: int

    def record(self) -> dict:
        return {"url": self.url, "port": self.port, "pid": self.pid}


def config(name: str, targets: dict[str, str]) -> dict:
    """Prometheus's configuration: every target (job name: ``host:port``) scraped every
    second, each sample labelled with the lab's name.

    >>> c = config("lf", {"testbed": "127.0.0.1:4000"})
    >>> c["scrape_configs"][0]["static_configs"]
    [{'targets': ['127.0.0.1:4000'], 'labels': {'lab': 'lf'}}]
    """
    return {"global": {"scrape_interval": f"{SCRAPE_S}s", "evaluation_interval": "5s"},
            "scrape_configs": [{"job_name": job, "scrape_interval": f"{SCRAPE_S}s",
                                "static_configs": [{"targets": [target],
                                                    "labels": {"lab": name}}]}
                               for job, target in targets.items()]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _get(url: str, timeout: float = 2) -> bytes | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.read()
    except (urllib.error.URLError, OSError):
        return None


def cors_origin(port: int) -> str:
    """``--web.cors.origin``: a regular expression Prometheus anchors, matching its own
    origin only (a page it serves itself needs no CORS; no other page is answered).

    >>> import re
    >>> rx = cors_origin(9090)
    >>> [bool(re.fullmatch(rx, o)) for o in ("http://127.0.0.1:9090", "http://127.0.0.1:90901",
    ...                                       "http://127a0a0a1:9090", "http://evil.example")]
    [True, False, False, False]
    """
    return re.escape(f"http://127.0.0.1:{port}")


def argv(binary: str, conf: Path, data: Path, port: int, name: str) -> list[str]:
    """Prometheus's command line: loopback only, no admin API, no lifecycle API, CORS for
    its own origin."""
    return [binary, f"--config.file={conf}", f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}", f"--web.cors.origin={cors_origin(port)}",
            "--storage.tsdb.retention.time=7d", f"--web.page-title=lab {name}"]


def start(*, name: str, targets: dict[str, str], folder: Path, out: Path, pid_dir: Path,
          stack: ExitStack, keep: bool = True, port: int | str = "auto") -> Server:
    """Start the lab's Prometheus (database in ``folder``, log in ``out``); with
    ``keep``, its database is copied to ``out`` when the stack unwinds, after it
    stopped."""
    binary = shutil.which(BINARY)
    if binary is None:
        raise ConfigError("--monitor", "Debian's prometheus is not installed (scripts/"
                                       "setup.sh installs it: make setup)")
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "prometheus.yml"
    conf.write_text(yaml.safe_dump(config(name, targets), sort_keys=False))
    chosen = _free_port() if port == "auto" else int(port)
    url = f"http://127.0.0.1:{chosen}/"
    if keep:  # unwound after the stop below: a closed database is copied
        stack.callback(keep_samples, folder / "data", out / layout.PROMETHEUS_SNAPSHOT)
    helper = Helper("prometheus", argv(binary, conf, folder / "data", chosen, name),
                    pid_dir=pid_dir, log=out / layout.PROMETHEUS_LOG)
    stack.callback(helper.stop, STOP_GRACE_S)
    if not wait_for(lambda: _get(f"{url}-/ready") is not None or not helper.alive(),
                    READY_TIMEOUT_S, interval=0.2) or not helper.alive():
        raise BringUpError(f"Prometheus did not start on 127.0.0.1:{chosen} (see "
                           f"{out / layout.PROMETHEUS_LOG})")
    return Server(url=url, port=chosen, pid=helper.pid)


def keep_samples(data: Path, dest: Path) -> Path | None:
    """Everything a stopped Prometheus held (its blocks, and its head as the write-ahead
    log it replays when started on the copy), copied to ``dest``; None if it wrote
    nothing."""
    if not data.is_dir():
        return None
    shutil.copytree(data, dest, ignore=shutil.ignore_patterns(*NOT_KEPT), dirs_exist_ok=True)
    return dest


def query(url: str, expr: str, timeout: float = 5) -> list[dict]:
    """An instant query's result vector (``[{"metric": {...}, "value": [t, "v"]}]``)."""
    q = urllib.parse.urlencode({"query": expr})
    body = _get(f"{url}api/v1/query?{q}", timeout)
    if body is None:
        raise OSError(f"Prometheus at {url} did not answer")
    answer = json.loads(body)
    if answer.get("status") != "success":
        raise ValueError(f"{expr}: {answer.get('error')}")
    return answer["data"]["result"]
