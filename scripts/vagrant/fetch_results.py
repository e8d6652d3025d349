#!/usr/bin/env python3
"""Fetch a run back from the lab VM's results page, as a student's browser does.

    fetch_results.py BASE_URL RUN SUMMARY_JSON OUT_DIR

BASE_URL is the page on this machine (http://127.0.0.1:8470, tunnelled into the VM), RUN
the run folder under results/ (NAME/TIMESTAMP), SUMMARY_JSON the run's summary.json as the
VM has it. Fetches the index (which must list RUN), the run's page, its report, the first
plot the page shows (a PNG), and the run as one .zip, whose summary.json must equal the
VM's. Saves what it fetched into OUT_DIR; exit 0, or 1 with one line saying what failed.
"""

from __future__ import annotations

import io
import json
import re
import sys
import urllib.request
import zipfile
from pathlib import Path


def get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as answer:
        return answer.read()


def main(base: str, run: str, summary_path: str, out: str) -> int:
    folder = Path(out)
    index = get(f"{base}/").decode()
    if run not in index:
        return fail(f"the index does not list {run}")
    page = get(f"{base}/{run}/").decode()
    (folder / "run-page.html").write_text(page)
    report = get(f"{base}/{run}/report.md")
    (folder / "report-fetched.md").write_bytes(report)
    images = re.findall(r'<img[^>]+src="([^"]+\.png)"', page)
    if not images:
        return fail("the run's page shows no plot")
    src = images[0] if images[0].startswith("/") else f"/{run}/{images[0]}"
    plot = get(f"{base}{src}")
    if not plot.startswith(b"\x89PNG\r\n\x1a\n"):
        return fail(f"{src} is not a PNG")
    (folder / "plot.png").write_bytes(plot)
    archive = get(f"{base}/{run}/?zip=1")
    (folder / "run.zip").write_bytes(archive)
    with zipfile.ZipFile(io.BytesIO(archive)) as z:
        names = z.namelist()
        member = next((n for n in names if n.endswith("/summary.json") or n == "summary.json"),
                      None)
        if member is None or "/variants/" in member:
            return fail("the run's .zip holds no summary.json at its top")
        fetched = json.loads(z.read(member))
    if fetched != json.loads(Path(summary_path).read_text()):
        return fail("the summary.json in the .zip differs from the VM's")
    print(f"fetch_results: index, page, report, {src} ({len(plot)} bytes), "
          f"the run as a .zip ({len(names)} files, {len(archive)} bytes): all as in the VM")
    return 0


def fail(line: str) -> int:
    print(f"fetch_results: {line}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:5]))
