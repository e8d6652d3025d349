"""MkDocs hooks of the docs site (``mkdocs.yml``): the pages generated from the code and
the lab guides, added to the site at build time and never written into ``docs/``.

- ``reference/scenario-file.md`` and ``reference/cli.md``: :mod:`testbed.reference`, from
  ``testbed schema`` and ``testbed``'s argument parser;
- ``img/SCENARIO.png``: the topology of each scenario a page shows (``testbed graph``);
- ``labs/``: every lab guide (``labs/*/README.md``) and their index, as they are in the
  repository, so a guide has one source; likewise ``changelog.md`` and
  ``contributing.md``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from mkdocs.structure.files import File, Files

REPO = Path(__file__).resolve().parents[1]
#: the scenarios whose topology a page draws (``![...](img/NAME.png)``)
DRAWN = ("agents-vs-training", "ecmp-vs-adaptive", "fat-tree", "lossless",
         "backbone-failover", "cross-region-writes")


def drawing(name: str, folder: Path) -> bytes:
    """The PNG ``testbed graph NAME -o FILE.png`` draws (first variant)."""
    from testbed import graph, scenario
    from testbed.cli import scenario_path

    sc = scenario.load(scenario_path(name))
    if sc.kind == "fabric":
        variant = sc.variants[0]
        g, title = graph.fabric_graph(variant.fabric("tb0000")), f"{sc.name}/{variant.name}"
    else:
        g, title = graph.backbone_graph(sc.experiment.bb), sc.name
    return graph.to_png(g, title, folder / f"{name}.png").read_bytes()


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
    with tempfile.TemporaryDirectory() as tmp:
        for name in DRAWN:
            files.append(File.generated(config, f"img/{name}.png",
                                        content=drawing(name, Path(tmp))))
    for name in ("CHANGELOG", "CONTRIBUTING"):
        files.append(File.generated(config, f"{name.lower()}.md",
                                    content=(REPO / f"{name}.md").read_text()))
    return files
