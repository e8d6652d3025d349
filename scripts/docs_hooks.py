"""MkDocs hooks of the docs site (``mkdocs.yml``): the pages generated from the code and
the lab guides, added to the site at build time and never written into ``docs/``.

- ``reference/scenario-file.md`` and ``reference/cli.md``: :mod:`testbed.reference`, from
  ``testbed schema`` and ``testbed``'s argument parser;
- ``labs/``: every lab guide (``labs/*/README.md``) and their index, as they are in the
  repository, so a guide has one source; likewise ``changelog.md`` and
  ``contributing.md``.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]


def on_files(files: Files, config) -> Files:
    from testbed.reference import markdown_pages

    for path, text in markdown_pages().items():
        files.append(File.generated(config, path, content=text))
    labs = REPO / "labs"
    files.append(File.generated(config, "labs/index.md",
                                content=(labs / "README.md").read_text()))
    for guide in sorted(labs.glob("lab*/README.md")):
        files.append(File.generated(config, f"labs/{guide.parent.name}/README.md",
                                    content=guide.read_text()))
    for name in ("CHANGELOG", "CONTRIBUTING"):
        files.append(File.generated(config, f"{name.lower()}.md",
                                    content=(REPO / f"{name}.md").read_text()))
    return files
