"""A Prometheus server of the lab's own (Debian's ``prometheus``), started with it on
request (``testbed up --monitor``): its configuration and database in the run folder,
listening on 127.0.0.1 only, scraping the lab's monitor every second, stopped and removed
with the lab. Its samples can be kept: at the teardown a TSDB snapshot goes into the
results folder, which ``prometheus --storage.tsdb.path=SNAPSHOT`` serves again later.
"""

from __future__ import annotations

import json
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
SCRAPE_S = 1


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


def start(*, name: str, targets: dict[str, str], folder: Path, out: Path, pid_dir: Path,
          stack: ExitStack, keep: bool = True, port: int | str = "auto") -> Server:
    """Start the lab's Prometheus (database in ``folder``, log in ``out``); with
    ``keep``, a snapshot of its samples goes to ``out`` when the stack unwinds."""
    binary = shutil.which(BINARY)
    if binary is None:
        raise ConfigError("--monitor", "Debian's prometheus is not installed (scripts/"
                                       "setup.sh installs it: make setup)")
    folder.mkdir(parents=True, exist_ok=True)
    conf = folder / "prometheus.yml"
    conf.write_text(yaml.safe_dump(config(name, targets), sort_keys=False))
    chosen = _free_port() if port == "auto" else int(port)
    url = f"http://127.0.0.1:{chosen}/"
    helper = Helper("prometheus", [
        binary, f"--config.file={conf}", f"--storage.tsdb.path={folder / 'data'}",
        f"--web.listen-address=127.0.0.1:{chosen}", "--web.enable-admin-api",
        "--storage.tsdb.retention.time=7d", f"--web.page-title=lab {name}"],
        pid_dir=pid_dir, log=out / layout.PROMETHEUS_LOG)
    stack.callback(helper.stop)
    if keep:  # unwound before the stop above: the server still answers
        stack.callback(snapshot, url, folder / "data", out / layout.PROMETHEUS_SNAPSHOT)
    if not wait_for(lambda: _get(f"{url}-/ready") is not None or not helper.alive(),
                    READY_TIMEOUT_S, interval=0.2) or not helper.alive():
        raise BringUpError(f"Prometheus did not start on 127.0.0.1:{chosen} (see "
                           f"{out / layout.PROMETHEUS_LOG})")
    return Server(url=url, port=chosen, pid=helper.pid)


def snapshot(url: str, data: Path, dest: Path) -> Path | None:
    """A snapshot of everything Prometheus holds (its head too), copied to ``dest``."""
    request = urllib.request.Request(f"{url}api/v1/admin/tsdb/snapshot", method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as r:
            name = json.loads(r.read())["data"]["name"]
    except (urllib.error.URLError, OSError, KeyError, ValueError):
        return None
    shutil.copytree(data / "snapshots" / name, dest, dirs_exist_ok=True)
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
