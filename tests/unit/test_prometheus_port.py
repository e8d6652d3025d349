"""Prometheus metrics on a port the kernel picks, so that two labs never collide; a fixed
port someone holds ends the bring-up in one line."""

from __future__ import annotations

import json
import socket
import urllib.request

import pytest

from controllers.telemetry import PrometheusExporter
from testbed.core.scenario import parse
from testbed.errors import BringUpError
from testbed.fabric.bringup import _metrics_url


def test_auto_is_valid_and_reaches_the_controller_as_auto():
    data = {"name": "p", "topology": {"planes": 1, "nodes": 4}, "agents": {"enabled": False},
            "training": {"enabled": True, "ranks": [0, 1, 2, 3]},
            "controller": {"prometheus_port": "auto"}}
    assert parse(data).variants[0].controller["prometheus_port"] == "auto"


def test_two_auto_exporters_listen_on_loopback_ports_of_their_own():
    a, b = PrometheusExporter("auto"), PrometheusExporter("auto")
    try:
        assert a.port != b.port and a.port > 0 and b.port > 0
        assert a.server.server_address[0] == b.server.server_address[0] == "127.0.0.1"
        text = urllib.request.urlopen(f"http://127.0.0.1:{a.port}/metrics", timeout=5).read()
        assert b"# TYPE testbed_port_backlog_bytes gauge" in text
    finally:
        for e in (a, b):
            e.server.shutdown()
            e.server.server_close()


def test_a_fixed_port_in_use_is_refused_by_the_exporter():
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    try:
        with pytest.raises(OSError):
            PrometheusExporter(holder.getsockname()[1])
    finally:
        holder.close()


def _status(tmp_path, *events: dict):
    path = tmp_path / "controller-events.jsonl"
    path.write_text("".join(json.dumps({"t": 0, **e}) + "\n" for e in events))
    return path


def test_the_bring_up_learns_the_url_from_the_controller(tmp_path):
    path = _status(tmp_path, {"event": "started"},
                   {"event": "prometheus", "port": 4321, "url": "http://127.0.0.1:4321/metrics"})
    assert _metrics_url(path, "auto") == "http://127.0.0.1:4321/metrics"
    assert _metrics_url(path, 0) is None


def test_a_port_the_controller_could_not_bind_is_one_line(tmp_path):
    path = _status(tmp_path, {"event": "prometheus_failed", "port": 9100,
                              "error": "Address already in use"})
    with pytest.raises(BringUpError) as exc:
        _metrics_url(path, 9100)
    message = str(exc.value)
    assert "\n" not in message
    assert message.startswith("controller.prometheus_port: 127.0.0.1:9100: Address already")
