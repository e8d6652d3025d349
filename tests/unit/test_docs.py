"""The docs: the site builds with no warning (MkDocs strict: a broken link or anchor fails
it), its generated references come from the code, the built site navigates and searches
from disk (every internal link of its HTML names a file and anchor in it), every link of the
README resolves, and every command-line argument has help text."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from testbed.core import reference
from testbed.core.cli import build_parser

REPO = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")

pytestmark = pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs is not installed "
                                "(make setup installs it with the dev dependencies)")


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(MKDOCS), "build", "--strict", "-f", str(root / "mkdocs.yml"),
                           "-d", str(site)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})


class Page(HTMLParser):
    """Headings and tables of a built page."""

    def __init__(self) -> None:
        super().__init__()
        self.headings: list[str] = []
        self.tables = 0
        self._in: str | None = None

    def handle_starttag(self, tag, attrs):
        if tag in ("h1", "h2"):
            self._in = tag
            self.headings.append("")
        self.tables += tag == "table"

    def handle_endtag(self, tag):
        if tag == self._in:
            self._in = None
            self.headings[-1] = self.headings[-1].replace("¶", "").strip()

    def handle_data(self, data):
        if self._in:
            self.headings[-1] += data


def parsed(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text())
    return page


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    done = build(REPO, out)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "WARNING" not in done.stderr, done.stderr[-3000:]
    return out


def test_the_site_builds_strictly_with_its_generated_references(site):
    index = parsed(site / "index.html")
    assert "AI fabric testbed" in index.headings[0] and "Where to start" in index.headings
    scenario_ref = parsed(site / "reference" / "scenario-file.html")
    assert scenario_ref.headings[0] == "Scenario file reference"
    assert scenario_ref.tables == 1
    text = (site / "reference" / "scenario-file.html").read_text()
    assert "topology.planes" in text and "faults[].at_s" in text
    cli_ref = parsed(site / "reference" / "cli.html")
    assert {f"testbed {name}" for name in ("run", "up", "inspect", "scenarios", "spec")} <= \
        set(cli_ref.headings)
    results_ref = parsed(site / "reference" / "results.html")
    assert results_ref.headings[:2] == ["Results reference", "The results folder"]
    text = (site / "reference" / "results.html").read_text()
    assert "chains.jsonl" in text and "runs[].agents.latency_ms.p99" in text
    assert "Analysing results" in parsed(site / "analysis.html").headings
    assert (site / "labs" / "lab01_oversubscription" / "index.html").exists()
    # the lesson pages show their fabric, drawn at build time
    assert (site / "img" / "fat-tree.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'src="../img/lossless.png"' in (site / "lessons" /
                                          "lossless-and-tenants.html").read_text()
    # the course pack: slides a section each, exams, and (the solutions being in this tree)
    # the instructor notes
    deck = (site / "teaching" / "slides" / "lab03.html").read_text()
    assert deck.count('<section class="slide">') == 5 and "assets/slides.css" in deck
    assert (site / "labs" / "exam1_fabrics" / "index.html").exists()
    assert "Timing" in parsed(site / "teaching" / "notes" / "lab01.html").headings


class Links(HTMLParser):
    """Every ``href`` and ``src`` of a built page, and the ids its anchors can land on."""

    def __init__(self) -> None:
        super().__init__()
        self.targets: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value is not None:
                self.targets.append(value)
            elif name in ("id", "name") and value:
                self.ids.add(value)


def broken_links(site: Path) -> list[str]:
    """The internal links of the built site's HTML that do not name a file in it (a folder,
    which a browser opening the site from disk shows as a listing, counts as broken) or
    whose ``#anchor`` is on no element of the page they name."""
    pages = {path: Links() for path in site.rglob("*.html")}
    for path, links in pages.items():
        links.feed(path.read_text())
    broken = []
    for path, links in pages.items():
        if path == site / "404.html":  # a web server's answer for any path: links from "/"
            continue
        for target in links.targets:
            if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I):  # https:, mailto:, data:
                continue
            link, _, anchor = target.partition("#")
            link = link.partition("?")[0]
            file = (path.parent / link).resolve() if link else path
            where = f"{path.relative_to(site)}: {target}"
            if not file.is_file() or site.resolve() not in file.parents:
                broken.append(where)
            elif anchor and file.suffix == ".html" and anchor not in pages[
                    site / file.relative_to(site.resolve())].ids:
                broken.append(where)
    return broken


def test_every_internal_link_of_the_built_site_names_a_file_and_anchor_in_it(site):
    assert len(list(site.rglob("*.html"))) > 40
    assert broken_links(site) == []


def test_the_link_check_finds_a_folder_link_and_a_missing_anchor(tmp_path):
    (tmp_path / "guide").mkdir()
    (tmp_path / "guide" / "index.html").write_text('<h2 id="here">x</h2>')
    (tmp_path / "index.html").write_text(
        '<a href="guide/">a folder</a> <a href="guide/index.html#here">fine</a> '
        '<a href="guide/index.html#gone">no anchor</a> <a href="#top">none here</a> '
        '<a href="https://example.org/">outside</a> <img src="missing.png">')
    assert broken_links(tmp_path) == ["index.html: guide/", "index.html: guide/index.html#gone",
                                      "index.html: #top", "index.html: missing.png"]


def test_the_site_needs_nothing_from_the_network(site):
    """No script, style sheet or image of the built site comes from another host: it is read
    where there is no network (the lab VM, a classroom)."""
    remote = {(path.relative_to(site).as_posix(), src) for path in site.rglob("*.html")
              for src in re.findall(r'<(?:script|img|link)[^>]+(?:src|href)="(https?://[^"]+)"',
                                    path.read_text())}
    assert remote == set()


CHROMIUM = shutil.which("chromium-headless-shell") or shutil.which("chromium")


def browse(url: str, profile: Path, *args: str,
           timeout: float = 120) -> subprocess.CompletedProcess:
    """Chromium, headless, on a page of the built site, in a network namespace of its own
    (only a loopback that is down): whatever the page or the browser would fetch stays on
    this host, and ``file://`` needs no network."""
    unshare = ["unshare", "--net"] if os.geteuid() == 0 else ["unshare", "-rn"]
    return subprocess.run([*unshare, CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                           "--no-first-run", "--disable-background-networking",
                           "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}",
                           *args, url], capture_output=True, text=True, timeout=timeout)


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium (scripts/setup.sh --dev "
                    "installs chromium-headless-shell where the distribution has it)")
def test_the_site_renders_in_a_browser(site, tmp_path, record_property):
    """The index and the scenario reference rendered by a real browser (the Material theme's
    scripts run): their headings and the reference's table are in the DOM it built, and a
    screenshot of each shows a drawn page, not a blank one."""
    from matplotlib import image

    for page, heading, tables in (("index.html", "Where to start", 0),
                                  ("reference/scenario-file.html",
                                   "Scenario file reference", 1)):
        url = (site / page).as_uri()
        dom = browse(url, tmp_path / "profile", "--dump-dom")
        assert dom.returncode == 0, dom.stderr[-2000:]
        rendered = Page()
        rendered.feed(dom.stdout)
        assert heading in rendered.headings, rendered.headings
        assert rendered.tables >= tables
        shot = tmp_path / (page.replace("/", "-").removesuffix(".html") + ".png")
        done = browse(url, tmp_path / "profile", f"--screenshot={shot}", "--window-size=1280,900",
                      "--hide-scrollbars")
        assert done.returncode == 0 and shot.exists(), done.stderr[-2000:]
        record_property(f"screenshot {page}", str(shot))
        pixels = image.imread(shot)
        assert pixels.shape[:2] == (900, 1280)
        # a page with text and a header bar: many distinct shades, not one colour
        assert pixels[..., :3].reshape(-1, 3).std(axis=0).max() > 0.1
        assert len({tuple(px) for px in pixels[::16, ::16, :3].reshape(-1, 3)}) > 20


def test_a_broken_link_fails_the_build(tmp_path):
    root = tmp_path / "repo"
    for name in ("docs", "labs", "scripts"):
        shutil.copytree(REPO / name, root / name,
                        ignore=shutil.ignore_patterns("__pycache__", "solution"))
    for name in ("mkdocs.yml", "CHANGELOG.md", "CONTRIBUTING.md"):
        shutil.copy(REPO / name, root / name)
    page = root / "docs" / "tour.md"
    page.write_text(page.read_text() + "\nSee [nowhere](no-such-page.md).\n")
    done = build(root, tmp_path / "site")
    assert done.returncode != 0 and "no-such-page.md" in done.stderr


def test_every_link_of_the_readme_resolves():
    text = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert len(links) > 10
    missing = [link for link in links if "://" not in link and not (REPO / link).exists()]
    assert missing == []


def test_every_command_line_argument_has_help_and_every_command_examples():
    parser = build_parser()
    assert reference.undocumented_arguments(parser) == []
    commands = reference._subcommands(parser)
    assert all(sub.epilog and "examples:" in sub.epilog for sub in commands.values())


def test_the_readme_is_short():
    assert len((REPO / "README.md").read_text().splitlines()) <= 200


def test_every_scenario_key_has_a_description():
    from testbed.core.schema import scenario_schema

    schema = scenario_schema()
    assert len(list(reference.properties(schema))) > 250  # nested keys and list items too
    assert reference.undescribed(schema) == []


def test_each_lesson_page_shows_its_key_figure_from_an_unflagged_run():
    """``make figures`` (scripts/lesson_figures.py) copies each lesson's key figure from a
    real run into docs/img/runs/ with a record of it; a lesson page shows each, and every
    record says which command made it, on what machine, and that no variant of the run
    was flagged by the fidelity monitor."""
    import importlib.util
    import json

    spec = importlib.util.spec_from_file_location("lesson_figures",
                                                  REPO / "scripts" / "lesson_figures.py")
    figures = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(figures)
    pages = "\n".join(p.read_text() for p in (REPO / "docs" / "lessons").glob("*.md"))
    for name, (scenario_file, _) in figures.FIGURES.items():
        png = REPO / "docs" / "img" / "runs" / f"{name}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        record = json.loads(png.with_suffix(".json").read_text())
        assert record["command"] == f".venv/bin/testbed run {scenario_file}"
        assert record["fidelity"] == "no variant flagged" and record["machine"], record
        assert f"](../img/runs/{name}.png)" in pages, f"no lesson page shows {name}.png"


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium (scripts/setup.sh --dev "
                    "installs chromium-headless-shell where the distribution has it)")
def test_search_works_on_the_site_opened_from_disk(site, tmp_path):
    """The search box of ``site/index.html`` opened from disk, with no network: the query in
    the address (``?q=``) is searched and results listed (MkDocs' own search worker cannot
    start from ``file://``; the offline plugin's index script and worker shim can)."""
    url = (site / "index.html").as_uri() + "?q=macsec"
    dom = browse(url, tmp_path / "profile", "--virtual-time-budget=10000", "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    found = re.search(r'md-search-result__meta">(\d+) matching documents?<', dom.stdout)
    assert found and int(found.group(1)) > 3, re.findall(r"md-search-result__meta[^<]*", dom.stdout)
