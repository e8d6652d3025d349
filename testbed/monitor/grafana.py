"""Grafana provisioning for users who run Grafana: a Prometheus data source and a
dashboard, generated from the panels the page draws (:mod:`testbed.monitor.panels`), plus
what only Grafana shows that way (every link's utilization and every port's queue as
bar gauges; the page draws those on the topology and in its port table).

``write(folder, prometheus_url, lab)`` writes::

    folder/provisioning/datasources/testbed.yaml
    folder/provisioning/dashboards/testbed.yaml   (a file provider of folder/dashboards)
    folder/dashboards/testbed-fabric.json          (or testbed-backbone.json)

which ``grafana-server`` takes with ``--config`` pointing ``paths.provisioning`` at
``folder/provisioning`` (or copied into ``/etc/grafana/provisioning``).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from testbed.monitor.panels import Panel

WIDTH = 24  # Grafana's grid is 24 columns wide


def datasource_uid(lab: str) -> str:
    """Grafana's uid of the lab's data source: letters, digits, - and _, 40 at most.

    >>> datasource_uid("lf"), datasource_uid("seed 2/ecmp")
    ('testbed-lf', 'testbed-seed-2-ecmp')
    """
    return re.sub(r"[^A-Za-z0-9_-]", "-", f"testbed-{lab}")[:40]


def _timeseries(panel: Panel, ds: dict, y: int, x: int) -> dict:
    return {"type": "timeseries", "title": panel.title, "datasource": ds,
            "gridPos": {"h": 8, "w": WIDTH // 2, "x": x, "y": y},
            "fieldConfig": {"defaults": {"unit": panel.unit}, "overrides": [
                {"matcher": {"id": "byName", "options": s.label},
                 "properties": [{"id": "color", "value": {"mode": "fixed",
                                                          "fixedColor": s.colour}}]}
                for s in panel.series]},
            "description": " ".join(s.note for s in panel.series if s.note),
            "targets": [{"refId": chr(65 + i), "datasource": ds, "expr": s.promql,
                         "legendFormat": s.label} for i, s in enumerate(panel.series)]}


def _bars(title: str, expr: str, legend: str, unit: str, ds: dict, y: int, *,
          maximum: float | None = None) -> dict:
    defaults: dict = {"unit": unit, "min": 0}
    if maximum is not None:
        defaults["max"] = maximum
    return {"type": "bargauge", "title": title, "datasource": ds,
            "gridPos": {"h": 10, "w": WIDTH // 2, "x": 0 if "link" in title else WIDTH // 2,
                        "y": y},
            "options": {"orientation": "horizontal", "displayMode": "gradient"},
            "fieldConfig": {"defaults": defaults, "overrides": []},
            "targets": [{"refId": "A", "datasource": ds, "expr": expr, "instant": True,
                         "legendFormat": legend}]}


def dashboard(panels: tuple[Panel, ...], lab: str, kind: str = "fabric") -> dict:
    """The dashboard: the page's charts, two a row, then the links (and a fabric's
    queues)."""
    ds = {"type": "prometheus", "uid": datasource_uid(lab)}
    out = [_timeseries(p, ds, 8 * (i // 2), (i % 2) * WIDTH // 2) for i, p in enumerate(panels)]
    y = 8 * ((len(panels) + 1) // 2)
    out.append(_bars("link utilization (each way)", "testbed_link_utilization",
                     "{{link}} {{direction}}", "percentunit", ds, y, maximum=1))
    if kind == "fabric":
        out.append(_bars("switch port queues", "testbed_port_queue_backlog_bytes",
                         "{{ifname}}", "bytes", ds, y))
    for i, panel in enumerate(out):
        panel["id"] = i + 1
    return {"uid": datasource_uid(f"{kind}-{lab}"), "title": f"testbed lab {lab}: {kind}",
            "tags": ["testbed"], "timezone": "browser", "schemaVersion": 38,
            "refresh": "5s", "time": {"from": "now-15m", "to": "now"}, "panels": out}


def write(folder: Path, prometheus_url: str, lab: str, panels: tuple[Panel, ...],
          kind: str = "fabric") -> Path:
    """The provisioning tree for this lab's Prometheus; returns its dashboard file."""
    sources = folder / "provisioning" / "datasources"
    providers = folder / "provisioning" / "dashboards"
    boards = folder / "dashboards"
    for d in (sources, providers, boards):
        d.mkdir(parents=True, exist_ok=True)
    (sources / "testbed.yaml").write_text(yaml.safe_dump({"apiVersion": 1, "datasources": [{
        "name": f"testbed lab {lab}", "type": "prometheus", "uid": datasource_uid(lab),
        "access": "proxy", "url": prometheus_url.rstrip("/"),
        "jsonData": {"timeInterval": "1s"}}]}, sort_keys=False))
    (providers / "testbed.yaml").write_text(yaml.safe_dump({"apiVersion": 1, "providers": [{
        "name": "testbed", "folder": "testbed", "type": "file",
        "options": {"path": str(boards.resolve())}}]}, sort_keys=False))
    board = boards / f"testbed-{kind}.json"
    board.write_text(json.dumps(dashboard(panels, lab, kind), indent=1))
    return board


def queries(board: dict) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of a dashboard."""
    return [(p["title"], t["expr"]) for p in board["panels"] for t in p["targets"]]
