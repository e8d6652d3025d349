"""The docs: the site builds with no warning (MkDocs strict: a broken link or anchor fails
it), its generated references come from the code, every link of the README resolves, and
every command-line argument has help text."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

from testbed import reference
from testbed.cli import build_parser

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
    scenario_ref = parsed(site / "reference" / "scenario-file" / "index.html")
    assert scenario_ref.headings[0] == "Scenario file reference"
    assert scenario_ref.tables == 1
    text = (site / "reference" / "scenario-file" / "index.html").read_text()
    assert "topology.planes" in text and "faults[].at_s" in text
    cli_ref = parsed(site / "reference" / "cli" / "index.html")
    assert {f"testbed {name}" for name in ("run", "up", "inspect", "scenarios", "spec")} <= \
        set(cli_ref.headings)
    assert (site / "labs" / "lab01_oversubscription" / "index.html").exists()
    # the lesson pages show their fabric, drawn at build time
    assert (site / "img" / "fat-tree.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'src="../../img/lossless.png"' in (site / "lessons" / "lossless-and-tenants" /
                                             "index.html").read_text()


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
    from testbed.schema import scenario_schema

    schema = scenario_schema()
    assert len(list(reference.properties(schema))) > 250  # nested keys and list items too
    assert reference.undescribed(schema) == []
