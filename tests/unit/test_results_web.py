"""Results folders in a browser (``testbed results serve``): a results folder written by the
lab's own report writer (two variants, their records, a plot, a key file) served for
real; its report page, a plot and every file over HTTP with their types, the page
rendered by headless Chromium, paths confined to the results root."""

from __future__ import annotations

import io
import json
import os
import select
import subprocess
import sys
import threading
import zipfile
from pathlib import Path

import pytest

from testbed.core.cli import main
from testbed.core.seeds import combine
from testbed.host.files import write_json
from testbed.monitor.browser import CHROMIUM, Browser
from testbed.reports import report
from testbed.reports.web import ROWS, ResultsServer

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"
DESCRIPTION = "Two routings <b>side</b> by side <img src=x onerror=window.__owned=1>."
FOLDER = "demo/20261206-010203"


def entry(name: str, goodput: float, p99: float) -> dict:
    """A variant's runs entry as the runner writes it (the shape test_seeds_report uses)."""
    return {"name": name, "seed": 1, "run_id": "0001", "dir": f"variants/{name}",
            "fabric": {"switches": 8, "hosts": 4, "links": 12, "start_s": 2.0, "stop_s": 0.5},
            "agents": {"chains_started": 10, "chains_completed": 10, "chains_failed": 0,
                       "latency_ms": {"p50": 5.0, "p95": 8.0, "p99": p99, "max": p99}},
            "training": {"bytes": 1000, "goodput_mbps": goodput, "iterations": 3,
                         "iteration_ms": {"p50": 100.0, "p99": 200.0}, "packets_lost": 1,
                         "reordered_packets": 0, "cnps_received": 0}}


def write_results(root: Path) -> Path:
    """results/demo/TIMESTAMP/ as a run leaves it: summary, manifest, report.md and its
    plots, each variant's chain records, a plot of a variant's own, a key file readable by
    its owner alone, and ``latest`` pointing to it."""
    out = root / FOLDER
    out.mkdir(parents=True)
    runs = [combine(n, [entry(n, g, p)]) for n, g, p in (("ecmp", 40.0, 30.0),
                                                         ("adaptive", 60.0, 20.0))]
    summary = {"scenario": "demo", "kind": "fabric", "seed": 1, "seeds": [1],
               "duration_s": 5, "description": DESCRIPTION,
               "capabilities": {"kernel": "k", "backends": {"switch datapath": "user"}},
               "runs": runs}
    write_json(out / "summary.json", summary)
    write_json(out / "manifest.json", {"scenario": "demo", "seed": 1})
    for run in runs:
        folder = out / "variants" / run["name"]
        folder.mkdir(parents=True)
        (folder / "chains.jsonl").write_text("".join(
            json.dumps({"ok": True, "latency_ms": 5.0 + i, "template": "rag",
                        "hops": [{"service": "<i>tool</i>", "ms": 1.5}]}) + "\n"
            for i in range(ROWS + 30)))
    report.write(summary, out)
    # a plot the report does not show (a variant's own)
    (out / "variants" / "ecmp" / "telemetry.png").write_bytes((out / "goodput.png").read_bytes())
    write_json(out / "macsec-keys.json", {"links": []}, secret=True)
    os.symlink(FOLDER, root / "latest")
    return out


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "results"
    folder = write_results(root)
    server = ResultsServer(root, 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, folder
    server.shutdown()
    server.close()


def get(server: ResultsServer, path: str, method: str = "GET", host: str | None = None):
    import http.client

    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host or f"127.0.0.1:{server.port}")
        conn.endheaders()
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        conn.close()


def test_the_report_page_a_plot_and_every_file_over_http(served):
    server, folder = served
    status, headers, body = get(server, "/")
    page = body.decode()
    assert status == 200 and headers["content-type"] == "text/html; charset=utf-8"
    assert f'href="/{FOLDER}/"' in page and "ecmp, adaptive" in page
    assert f'latest: <a href="/{FOLDER}/"' in page

    status, headers, body = get(server, f"/{FOLDER}/")
    page = body.decode()
    assert status == 200 and "script-src" not in headers["content-security-policy"]
    assert "default-src 'none'" in headers["content-security-policy"]
    # the report, rendered: its headings, its tables, its plot inline, its text escaped
    assert "<h2>Results</h2>" in page and "<h3>Agent chains</h3>" in page
    assert "<th>variant</th><th>chain p50 ms</th>" in page
    assert f'<img src="/{FOLDER}/goodput.png" alt="goodput per variant">' in page
    assert f'<img src="/{FOLDER}/chain_latency.png" alt="chain latency">' in page
    # a plot the report does not show has its own figure
    assert page.count(f'<img src="/{FOLDER}/variants/ecmp/telemetry.png"') == 1
    assert "<figcaption>variants/ecmp/telemetry.png</figcaption>" in page
    assert "goodput.png</figcaption>" not in page
    assert "Two routings &lt;b&gt;side&lt;/b&gt; by side &lt;img src=x" in page
    assert "<b>side" not in page and "<img src=x" not in page
    # each variant's records: the first ROWS, with a link to the whole file
    for variant in ("ecmp", "adaptive"):
        url = f"/{FOLDER}/variants/{variant}/chains.jsonl"
        assert f'<h3 data-folder="variants/{variant}">variant {variant}</h3>' in page
        assert f'<a href="{url}?download=1" download>the whole file</a>' in page
    assert page.count('<table class="records">') == 2
    assert page.count("<td>true</td>") == 2 * ROWS
    assert "&lt;i&gt;tool&lt;/i&gt;" in page
    # every file, downloadable; the key file listed, not served
    for name in ("summary.json", "manifest.json", "report.md", "goodput.png"):
        assert f'href="/{FOLDER}/{name}?download=1"' in page, name
    assert "macsec-keys.json</td><td>" in page and "not served" in page
    assert f'href="/{FOLDER}/macsec-keys.json' not in page

    status, headers, body = get(server, f"/{FOLDER}/goodput.png")
    assert status == 200 and headers["content-type"] == "image/png"
    assert body[:8] == PNG and int(headers["content-length"]) == len(body)
    assert body == (folder / "goodput.png").read_bytes()
    status, headers, body = get(server, f"/{FOLDER}/report.md?download=1")
    assert headers["content-type"] == "text/plain; charset=utf-8"
    assert headers["content-disposition"] == "attachment; filename*=UTF-8''report.md"
    assert body == (folder / "report.md").read_bytes()
    assert get(server, f"/{FOLDER}/summary.json")[1]["content-type"] == "application/json"
    jsonl = get(server, f"/{FOLDER}/variants/ecmp/chains.jsonl")
    assert jsonl[1]["content-type"].startswith("text/plain")
    assert len(jsonl[2].splitlines()) == ROWS + 30
    status, headers, body = get(server, f"/{FOLDER}/goodput.png", method="HEAD")
    assert status == 200 and body == b"" and int(headers["content-length"]) > 1000
    # the latest link, inside the root, leads to the same folder
    assert get(server, "/latest/goodput.png")[2][:8] == PNG


def test_a_folder_downloads_as_one_zip(served):
    """The page's .zip: every file it serves, under the folder's name; the key file not."""
    server, folder = served
    assert f'href="/{FOLDER}/?zip=1" download' in get(server, "/")[2].decode()
    assert f'href="/{FOLDER}/?zip=1" download' in get(server, f"/{FOLDER}/")[2].decode()
    status, headers, body = get(server, f"/{FOLDER}/?zip=1")
    assert status == 200 and headers["content-type"] == "application/zip"
    top = FOLDER.replace("/", "-")
    assert headers["content-disposition"] == f"attachment; filename*=UTF-8''{top}.zip"
    with zipfile.ZipFile(io.BytesIO(body)) as z:
        names = set(z.namelist())
        assert json.loads(z.read(f"{top}/summary.json")) == json.loads(
            (folder / "summary.json").read_text())
        assert z.read(f"{top}/goodput.png") == (folder / "goodput.png").read_bytes()
    assert {f"{top}/report.md", f"{top}/variants/ecmp/chains.jsonl",
            f"{top}/variants/adaptive/chains.jsonl"} <= names
    assert f"{top}/macsec-keys.json" not in names and all(n.startswith(f"{top}/") for n in names)
    assert get(server, "/demo/?zip=1")[0] == 404  # no archive of what is not a results folder


def test_the_default_root_is_results_here_else_the_labs_own(tmp_path, monkeypatch):
    from testbed import REPO
    from testbed.reports.web import default_root

    monkeypatch.chdir(tmp_path)
    assert default_root() == REPO / "results"
    (tmp_path / "results").mkdir()
    assert default_root() == Path("results")


def test_paths_stay_under_the_results_root(served, tmp_path):
    server, folder = served
    secret = tmp_path / "secret.txt"
    secret.write_text("not results\n")
    os.symlink(secret, folder / "leak.txt")
    os.symlink(tmp_path, folder / "up")
    os.mkfifo(folder / "pipe.jsonl")
    for path, status in ((f"/{FOLDER}/../../../secret.txt", 400),
                         (f"/{FOLDER}/%2e%2e/%2e%2e/%2e%2e/secret.txt", 400),
                         (f"/{FOLDER}/..%2f..%2f..%2fsecret.txt", 400),
                         (f"/{FOLDER}/leak.txt", 403), (f"/{FOLDER}/up/secret.txt", 403),
                         (f"/{FOLDER}/up/", 403), (f"/{FOLDER}/pipe.jsonl", 404),
                         (f"/{FOLDER}/macsec-keys.json", 403), ("/demo/", 404),
                         (f"/{FOLDER}/variants/", 404), ("/nothing", 404),
                         (f"/{FOLDER}/.hidden", 404), (f"/{FOLDER}//report.md", 400),
                         (f"/{FOLDER}/report.md%00.png", 400)):
        got, headers, body = get(server, path)
        assert got == status, (path, got, body)
        assert b"not results" not in body and headers["content-type"].startswith("text/plain")
    page = get(server, f"/{FOLDER}/")[2].decode()
    assert "leak.txt" not in page and "secret.txt" not in page and "pipe.jsonl" not in page


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium (make setup-dev installs "
                    "chromium-headless-shell where the distribution has it)")
def test_the_results_page_renders_in_a_browser(served, tmp_path, record_property):
    server, folder = served
    with Browser(tmp_path / "profile") as browser:
        browser.open(f"{server.url}{FOLDER}/")
        browser.wait_for("document.readyState === 'complete' && "
                         "[...document.images].every(i => i.complete)", 30)
        headings = browser.evaluate("[...document.querySelectorAll('h2')]"
                                    ".map(h => h.textContent)")
        assert {"Results", "Agent chains"} <= set(headings) | set(
            browser.evaluate("[...document.querySelectorAll('h3')].map(h => h.textContent)"))
        # the report's plots are drawn (decoded, with their size), and no other image exists
        images = browser.evaluate("[...document.images].map(i => [i.alt, i.naturalWidth])")
        assert sorted(alt for alt, _ in images) == ["chain latency", "goodput per variant",
                                                    "variants/ecmp/telemetry.png"]
        assert all(width > 100 for _, width in images), images
        assert browser.evaluate("window.__owned === undefined")
        text = browser.evaluate("document.getElementById('report').textContent")
        assert DESCRIPTION in text
        rows = browser.evaluate("[...document.querySelectorAll('table.records')]"
                                ".map(t => t.tBodies[0].rows.length)")
        assert rows == [ROWS, ROWS]
        shot = browser.screenshot(tmp_path / "results.png")
        record_property("screenshot", str(shot))
        assert shot.read_bytes()[:8] == PNG


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])
def test_testbed_results_serve_serves_until_stopped(tmp_path, stop):
    """As a user runs it: the command says where, answers, and stops on Ctrl-C (SIGINT)
    or a SIGTERM (``timeout``), exit 0."""
    import signal
    import urllib.request

    write_results(tmp_path / "results")
    proc = subprocess.Popen([sys.executable, "-m", "testbed.core.cli", "results", "serve",
                             str(tmp_path / "results"), "--port", "auto"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=sigint_default)
    try:
        ready, _, _ = select.select([proc.stdout], [], [], 60)
        assert ready, "the command said nothing"
        first = proc.stdout.readline()
        url = first.split(" at ")[1].split()[0]
        assert url.startswith("http://127.0.0.1:") and url.endswith("/"), first
        page = urllib.request.urlopen(f"{url}{FOLDER}/", timeout=10).read().decode()
        assert "<h2>Results</h2>" in page
        plot = urllib.request.urlopen(f"{url}{FOLDER}/goodput.png", timeout=10).read()
        assert plot[:8] == PNG
    finally:
        proc.send_signal(getattr(signal, stop))
        code = proc.wait(20)
    assert code == 0, proc.stderr.read()


def sigint_default() -> None:
    """Ctrl-C's default in the child, also where the tests run with SIGINT ignored (a
    shell without job control starts them so)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_bad_arguments_are_one_line_and_exit_2(tmp_path, capsys):
    import socket

    assert main(["results", "serve", str(tmp_path / "none")]) == 2
    assert main(["results", "serve", str(tmp_path), "--port", "http"]) == 2
    assert main(["results", "serve", str(tmp_path), "--port", "80"]) == 2
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        assert main(["results", "serve", str(tmp_path), "--port", str(port)]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4
    assert lines[0].startswith("testbed: error: DIR: ") and "no such folder" in lines[0]
    assert lines[1].startswith("testbed: error: --port: 'http'")
    assert lines[2].startswith("testbed: error: --port: 80 must be 1024..65535")
    assert f"--port: 127.0.0.1:{port}: Address already in use" in lines[3]
