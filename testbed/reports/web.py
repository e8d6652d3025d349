"""``testbed results serve [DIR] [--port N]``: the results folders under ``DIR`` as web
pages, for a browser on this machine or, through an ssh tunnel, on the host of a lab VM.

- ``/``: every results folder under ``DIR`` (``NAME/TIMESTAMP/``, a lab's, ``latest``),
  newest first, with its scenario and variants;
- ``/NAME/TIMESTAMP/``: one folder's page: its report (``report.md`` as HTML), its plots
  inline, each variant's records as tables (the first rows of every JSON-lines file, with
  a link to the whole file) and every file, each downloadable (``?download=1``); with
  ``DIR`` one results folder, ``/`` is its page;
- ``/NAME/TIMESTAMP/FILE``: a file of it, with its content type;
- ``/NAME/TIMESTAMP/?zip=1``: the whole folder as one .zip (what every user may read).

Read-only (GET and HEAD), on 127.0.0.1 only, for requests addressed to it there
(:mod:`testbed.monitor.loopback`); every path is confined to ``DIR`` (no ``..``, no
hidden files, no symbolic link that leads out of it), only regular files are served and
only those every user of the machine may read (a run's key files are its owner's alone:
listed, not served); a folder that is not a results folder has no listing. The pages run
no script.
"""

from __future__ import annotations

import json
import os
import signal
import stat
import sys
import tempfile
import time
import zipfile
from html import escape
from http.server import ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlparse

from testbed import REPO
from testbed.core import layout
from testbed.errors import ConfigError
from testbed.monitor.loopback import LoopbackHandler
from testbed.reports.markdown import to_html

DEFAULT_PORT = 8470
#: records shown of each JSON-lines file, and columns of its table at most
ROWS = 20
COLUMNS = 16
#: characters of one cell; a longer value is cut (the whole file has it)
CELL = 120
#: bytes of one record read for its table at most (a longer one is skipped)
RECORD_BYTES = 1 << 20
#: how deep under the root results folders are looked for (NAME/TIMESTAMP is 2)
DEPTH = 3
MAX_FOLDERS = 2000
#: what a results folder holds (one of them at least)
MARKERS = (layout.SUMMARY, layout.REPORT, layout.MANIFEST)
TEXT = "text/plain; charset=utf-8"
HTML = "text/html; charset=utf-8"
TYPES = {".png": "image/png", ".jpg": "image/jpeg", ".jpeg": "image/jpeg",
         ".gif": "image/gif", ".json": "application/json", ".pcap": "application/vnd.tcpdump.pcap",
         ".pcapng": "application/vnd.tcpdump.pcap", ".gz": "application/gzip",
         ".tar": "application/x-tar"}
#: shown as text in the browser (never as a page of their own: no .html, no .svg here)
TEXTS = (".jsonl", ".md", ".log", ".txt", ".yaml", ".yml", ".csv", ".dot", ".mmd", ".conf",
         ".tmpl", ".cfg", ".html", ".htm", ".svg", ".xml", ".js")
IMAGES = (".png", ".jpg", ".jpeg", ".gif")
#: a page: no script at all, images and styles of its own only, framed by no other page
PAGE_POLICY = ("default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; "
               "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
#: a file: nothing in it runs, even opened on its own
FILE_POLICY = "default-src 'none'; img-src 'self'; style-src 'unsafe-inline'; sandbox"
STYLE = """body{font:14px/1.45 system-ui,sans-serif;margin:1.5em auto;max-width:1200px;
padding:0 1em;color:#222}table{border-collapse:collapse;margin:.5em 0 1em}
td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;vertical-align:top}
th{background:#f3f3f3}pre{background:#f6f6f6;padding:.6em;overflow-x:auto}
img{max-width:100%;border:1px solid #eee}code{background:#f3f3f3;padding:0 2px}
.records td{font:12px monospace;max-width:28em;overflow-wrap:anywhere}
nav{margin-bottom:1em}figure{margin:1em 0}figcaption{color:#555}.private{color:#a00}
section{margin:1.5em 0}"""


class Refused(Exception):
    """A request the site does not answer: its status and one line."""

    def __init__(self, status: int, line: str) -> None:
        super().__init__(line)
        self.status = status


def human(size: int) -> str:
    """A file size in B, KB, MB, GB.

    >>> human(512), human(2048), human(5 * 10**6)
    ('512 B', '2.0 KB', '5.0 MB')
    """
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} GB"


def _readable_by_all(st: os.stat_result) -> bool:
    return bool(st.st_mode & stat.S_IROTH)


class ResultsSite:
    """The pages of the results folders under ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    # -- where a URL leads ---------------------------------------------------------------
    def locate(self, url_path: str) -> Path:
        """The file or folder ``url_path`` names under the root; :class:`Refused` if it
        leaves the root or names what is not served."""
        text = unquote(url_path)
        if "\0" in text or "\\" in text:
            raise Refused(400, "a path with NUL or backslash")
        parts = text.split("/")[1:]
        if parts and parts[-1] == "":
            parts.pop()  # a folder's trailing slash
        for part in parts:
            if part in ("", ".", ".."):
                raise Refused(400, "a path with an empty, '.' or '..' part")
            if part.startswith("."):
                raise Refused(404, "not found")
        try:
            target = self.root.joinpath(*parts).resolve(strict=True)
        except (OSError, RuntimeError):
            raise Refused(404, "not found") from None
        if target != self.root and not target.is_relative_to(self.root):
            raise Refused(403, "outside the results folder")
        return target

    def url(self, path: Path) -> str:
        """The URL of ``path`` (a file or folder under the root)."""
        rel = path.relative_to(self.root).as_posix()
        if rel == ".":
            return "/"
        return "/" + quote(rel) + ("/" if path.is_dir() else "")

    def is_results(self, folder: Path) -> bool:
        return any((folder / m).is_file() for m in MARKERS)

    def folders(self) -> list[Path]:
        """Every results folder under the root (symbolic links not followed), newest
        first."""
        found: list[Path] = []

        def walk(folder: Path, depth: int) -> None:
            if len(found) >= MAX_FOLDERS:
                return
            if self.is_results(folder):
                found.append(folder)
                return  # a results folder holds no other
            if depth >= DEPTH:
                return
            try:
                entries = sorted(os.scandir(folder), key=lambda e: e.name)
            except OSError:
                return
            for e in entries:
                if not e.name.startswith(".") and e.is_dir(follow_symlinks=False):
                    walk(Path(e.path), depth + 1)

        walk(self.root, 0)
        return sorted(found, key=lambda p: _mtime(p), reverse=True)

    # -- answers -------------------------------------------------------------------------
    def answer(self, path: str) -> tuple[int, str, bytes | tuple, dict]:
        url = urlparse(path)
        try:
            target = self.locate(url.path)
            if target.is_dir():
                query = parse_qs(url.query)
                if "zip" in query and self.is_results(target):
                    return self.archive(target)
                if self.is_results(target):  # the root too, when it is one folder
                    body = self.folder_page(target)
                elif target == self.root:
                    body = self.index_page()
                else:
                    raise Refused(404, "not a results folder (folders are not listed)")
                return 200, HTML, body, {"Content-Security-Policy": PAGE_POLICY}
            download = "download" in parse_qs(url.query)
            return self.file(target, download)
        except Refused as exc:
            return exc.status, TEXT, f"{exc}\n".encode(), {}

    def file(self, path: Path, download: bool) -> tuple[int, str, tuple, dict]:
        st = os.stat(path)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(404, "not a file")
        if not _readable_by_all(st):
            raise Refused(403, f"{path.name} is its owner's alone (mode "
                               f"{stat.S_IMODE(st.st_mode):o}): read it on the lab machine")
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        stream = os.fdopen(fd, "rb")
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            stream.close()
            raise Refused(404, "not a file")
        headers = {"Content-Security-Policy": FILE_POLICY}
        if download:
            headers["Content-Disposition"] = f"attachment; filename*=UTF-8''{quote(path.name)}"
        return 200, content_type(path), (stream, st.st_size), headers

    def archive(self, folder: Path) -> tuple[int, str, tuple, dict]:
        """The results folder as one .zip: every file the page lists as served, under a
        folder named after it (its path under the root, ``/`` as ``-``)."""
        rel = folder.relative_to(self.root).as_posix()
        name = (folder.name if rel == "." else rel.replace("/", "-"))
        spool = tempfile.TemporaryFile()
        try:
            with zipfile.ZipFile(spool, "w", zipfile.ZIP_DEFLATED, compresslevel=6) as z:
                for path in self._files(folder):
                    if not _readable_by_all(path.stat()):
                        continue
                    packed = zipfile.ZIP_STORED if path.suffix in IMAGES else None
                    z.write(path, f"{name}/{path.relative_to(folder).as_posix()}",
                            compress_type=packed)
            size = spool.tell()
            spool.seek(0)
        except BaseException:
            spool.close()
            raise
        return 200, "application/zip", (spool, size), {
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name)}.zip"}

    # -- pages ---------------------------------------------------------------------------
    def _page(self, title: str, body: list[str]) -> bytes:
        return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
                f"<title>{escape(title)}</title><style>{STYLE}</style></head><body>\n"
                + "\n".join(body) + "\n</body></html>\n").encode()

    def index_page(self) -> bytes:
        rows = []
        for folder in self.folders():
            summary = _summary(folder)
            runs = summary.get("runs") if isinstance(summary.get("runs"), list) else []
            names = ", ".join(str(r.get("name", "?")) for r in runs if isinstance(r, dict))
            rel = folder.relative_to(self.root).as_posix()
            rows.append(
                f'<tr><td><a href="{escape(self.url(folder))}">{escape(rel)}</a></td>'
                f"<td>{escape(str(summary.get('scenario', '')))}</td>"
                f"<td>{escape(str(summary.get('kind', '')))}</td>"
                f"<td>{escape(names)}</td>"
                f"<td>{escape(rates(summary))}</td>"
                f"<td>{escape(time.strftime('%Y-%m-%d %H:%M', time.localtime(_mtime(folder))))}"
                f'</td><td><a href="{escape(self.url(folder))}?zip=1" download>.zip</a></td>'
                "</tr>")
        latest = self.root / "latest"
        note = []
        if latest.is_symlink():
            try:
                target = latest.resolve(strict=True)
            except (OSError, RuntimeError):
                target = None
            if target is not None and target.is_relative_to(self.root) and \
                    target.is_dir() and self.is_results(target):
                rel = target.relative_to(self.root).as_posix()
                note = [f'<p>latest: <a href="{escape(self.url(target))}">{escape(rel)}</a></p>']
        body = [f"<h1>Results in {escape(str(self.root))}</h1>", *note]
        if rows:
            body += ["<table><thead><tr><th>folder</th><th>scenario</th><th>kind</th>"
                     "<th>variants</th><th>rates</th><th>written</th><th></th></tr></thead>"
                     "<tbody>", *rows,
                     "</tbody></table>"]
        else:
            body.append("<p>No results folder here yet: <code>testbed run</code> writes one.</p>")
        return self._page(f"results: {self.root.name}", body)

    def folder_page(self, folder: Path) -> bytes:
        rel = folder.relative_to(self.root).as_posix()
        rel = folder.name if rel == "." else rel
        summary = _summary(folder)
        base = self.url(folder)
        shown: set[str] = set()

        def resolve(url: str, image: bool) -> str | None:
            if url.startswith(("http://", "https://")) and not image:
                return url
            if "://" in url or url.startswith(("/", "#")) or ":" in url.split("/")[0]:
                return None
            try:
                target = self.locate(f"{base}{url}")
            except Refused:
                return None
            if image:
                shown.add(target.relative_to(folder).as_posix())
            return self.url(target)

        title = str(summary.get("scenario") or rel)
        body = [f'<nav><a href="/">all results</a> / {escape(rel)}</nav>'
                if folder != self.root else "",
                f"<h1>{escape(title)} <small>{escape(rel)}</small></h1>",
                f'<p><a href="{escape(base)}?zip=1" download>this folder as a .zip</a></p>']
        report = folder / layout.REPORT
        if report.is_file() and _readable_by_all(report.stat()):
            text = report.read_text(errors="replace")
            html = to_html(text, resolve)
            body += ['<section id="report">', html, "</section>"]
        else:
            body.append('<p id="report">No report.md in this folder.</p>')
        files = self._files(folder)
        plots = [p for p in files if p.suffix in IMAGES and
                 p.relative_to(folder).as_posix() not in shown]
        if plots:
            body.append('<section id="plots"><h2>Plots</h2>')
            for p in plots:
                name = p.relative_to(folder).as_posix()
                body.append(f'<figure><img src="{escape(self.url(p))}" alt="{escape(name)}">'
                            f"<figcaption>{escape(name)}</figcaption></figure>")
            body.append("</section>")
        records = [p for p in files if p.suffix == ".jsonl"]
        if records:
            body.append('<section id="records"><h2>Records</h2>')
            current = None
            for p in records:
                where = p.parent.relative_to(folder).as_posix()
                if where != current:
                    name = where.removeprefix(f"{layout.VARIANTS}/")
                    heading = ("this folder" if where == "." else f"variant {name}"
                               if where.startswith(f"{layout.VARIANTS}/") else where)
                    body.append(f'<h3 data-folder="{escape(where)}">{escape(heading)}</h3>')
                    current = where
                body += self._records(p)
            body.append("</section>")
        body += ['<section id="files"><h2>Files</h2><table><thead><tr><th>file</th>'
                 "<th>size</th><th></th></tr></thead><tbody>"]
        for p in files:
            name = p.relative_to(folder).as_posix()
            st = p.stat()
            if _readable_by_all(st):
                link = (f'<a href="{escape(self.url(p))}">{escape(name)}</a>',
                        f'<a href="{escape(self.url(p))}?download=1" download>download</a>')
            else:
                link = (escape(name), '<span class="private">its owner\'s alone: not '
                                      "served</span>")
            body.append(f"<tr><td>{link[0]}</td><td>{human(st.st_size)}</td>"
                        f"<td>{link[1]}</td></tr>")
        body.append("</tbody></table></section>")
        return self._page(f"{title}: {rel}", body)

    def _files(self, folder: Path) -> list[Path]:
        """Every regular file of ``folder``, at any depth, that stays under the root
        (hidden ones and symbolic links out of it left out), in path order."""
        out = []
        for top, dirs, names in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            for name in sorted(names):
                if name.startswith("."):
                    continue
                path = Path(top) / name
                try:
                    real = path.resolve(strict=True)
                    if not real.is_relative_to(self.root) or not real.is_file():
                        continue
                except (OSError, RuntimeError):
                    continue
                out.append(path)
        return sorted(out, key=lambda p: p.relative_to(folder).parts)

    def _records(self, path: Path) -> list[str]:
        """The first :data:`ROWS` records of a JSON-lines file as a table."""
        url = self.url(path)
        head = (f'<p><a href="{escape(url)}">{escape(path.name)}</a> '
                f"({human(path.stat().st_size)}): ")
        if not _readable_by_all(path.stat()):
            return [head + "its owner's alone: not served</p>"]
        records: list[dict] = []
        with path.open("rb") as f:
            while len(records) < ROWS:
                raw = f.readline(RECORD_BYTES)
                if not raw:
                    break
                if not raw.endswith(b"\n") and len(raw) == RECORD_BYTES:
                    while (rest := f.readline(RECORD_BYTES)) and not rest.endswith(b"\n"):
                        pass  # too long to show: skipped to its end
                    continue
                try:
                    record = json.loads(raw)
                except ValueError:
                    continue
                records.append(record if isinstance(record, dict) else {"value": record})
        if not records:
            return [head + "no records</p>"]
        columns: list[str] = []
        for r in records:
            for key in r:
                if key not in columns:
                    columns.append(key)
        more = len(columns) > COLUMNS
        columns = columns[:COLUMNS]
        lines = [head + f"the first {len(records)} records"
                 + (f", {COLUMNS} columns" if more else "")
                 + f' (<a href="{escape(url)}?download=1" download>the whole file</a>)</p>',
                 '<table class="records"><thead><tr>'
                 + "".join(f"<th>{escape(str(c))}</th>" for c in columns) + "</tr></thead><tbody>"]
        for r in records:
            lines.append("<tr>" + "".join(f"<td>{escape(_cell(r.get(c)))}</td>"
                                          for c in columns) + "</tr>")
        lines.append("</tbody></table>")
        return lines


def _cell(value) -> str:
    text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
    return text if len(text) <= CELL else text[:CELL - 1] + "…"


def rates(summary: dict) -> str:
    """The index's ``rates`` cell: the scenario's rates as shipped, or scaled by ``--fit``.

    >>> rates({}), rates({"fit": {"factor": 0.6, "scaled": True}})
    ('as shipped', 'x0.6 (--fit)')
    >>> rates({"fit": "tampered"})
    'as shipped'
    """
    fit = summary.get("fit")
    if isinstance(fit, dict) and fit.get("scaled") and isinstance(fit.get("factor"),
                                                                  int | float):
        return f"x{fit['factor']:g} (--fit)"
    return "as shipped"


def _summary(folder: Path) -> dict:
    path = folder / layout.SUMMARY
    try:
        if path.stat().st_size > 50_000_000 or not _readable_by_all(path.stat()):
            return {}
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _mtime(folder: Path) -> float:
    for marker in MARKERS:
        try:
            return (folder / marker).stat().st_mtime
        except OSError:
            continue
    return 0.0


def content_type(path: Path) -> str:
    """What a file is served as: its type, text for anything meant to be read, bytes
    for the rest.

    >>> [content_type(Path(p)) for p in ("a.png", "r.md", "x.html", "w.pcap", "k")]
    ['image/png', 'text/plain; charset=utf-8', 'text/plain; charset=utf-8', \
'application/vnd.tcpdump.pcap', 'application/octet-stream']
    """
    suffix = path.suffix.lower()
    if suffix in TEXTS:
        return TEXT
    return TYPES.get(suffix, "application/octet-stream")


class ResultsServer:
    """The site on 127.0.0.1:``port`` (0: one the kernel picks), served by a thread."""

    def __init__(self, root: Path, port: int = DEFAULT_PORT) -> None:
        site = self.site = ResultsSite(root)

        class Handler(LoopbackHandler):
            def answer(self, path: str):
                return site.answer(path)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port: int = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/"

    def serve_forever(self) -> None:
        self.httpd.serve_forever()

    def shutdown(self) -> None:
        self.httpd.shutdown()

    def close(self) -> None:
        self.httpd.server_close()


def _port(value: str) -> int:
    if value == "auto":
        return 0
    try:
        port = int(value)
    except ValueError:
        raise ConfigError("--port", f"{value!r} must be a port number or auto") from None
    if not 1024 <= port <= 65535:
        raise ConfigError("--port", f"{port} must be 1024..65535, or auto")
    return port


def default_root() -> Path:
    """``results`` here, else the lab's own (where ``make run-scenario`` writes)."""
    here = Path("results")
    return here if here.is_dir() else REPO / "results"


def cmd_results_serve(args) -> int:
    root = Path(args.dir) if args.dir else default_root()
    if not root.is_dir():
        raise ConfigError("DIR", f"{root}: no such folder (testbed run writes results/)")
    port = _port(str(args.port))
    try:
        server = ResultsServer(root, port)
    except OSError as exc:
        raise ConfigError("--port", f"127.0.0.1:{port}: {exc.strerror or exc}; give "
                                    "another port, or auto") from None
    print(f"results of {server.site.root} at {server.url} (Ctrl-C stops it)\n"
          f"from another machine: ssh -L {server.port}:127.0.0.1:{server.port} USER@HOST, "
          f"then open {server.url} there", flush=True)
    def stop(*_) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)  # timeout, kill: as Ctrl-C
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        print("stopped", file=sys.stderr)
    finally:
        server.close()
    return 0


def add_parsers(sub) -> None:
    group = sub.add_parser("results", help="results folders: serve them as web pages")
    verbs = group.add_subparsers(dest="results_command", required=True)
    p = verbs.add_parser("serve", help="the results folders under DIR as pages on "
                                       "127.0.0.1: reports, plots, records, every file")
    p.add_argument("dir", nargs="?", metavar="DIR",
                   help="the results root, or one results folder (default: results here, "
                        "else the lab's own results folder)")
    p.add_argument("--port", default=str(DEFAULT_PORT),
                   help=f"port on 127.0.0.1, or auto (default {DEFAULT_PORT})")
    p.set_defaults(func=cmd_results_serve)
