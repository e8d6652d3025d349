"""Workload kinds: one registry shape (topologies.plugins.Registry, as the fault kinds
have), the built-in kinds in it, and a kind of one's own by dotted path: its parameters
checked by its model when a run loads it, and a validation that loads nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.core.scenario import parse, validate
from testbed.errors import ConfigError
from testbed.faults import kinds as fault_kinds
from testbed.workloads import iperf3, kinds
from topologies import plugins
from topologies.params import ParamError

REPO = Path(__file__).resolve().parents[2]
TOPO = {"planes": 2, "nodes": 4, "leaves_per_plane": 2, "spines_per_plane": 2}
ECHO = "examples.workloads.udp_echo:UdpEcho"


def scenario(*workloads: dict) -> dict:
    return {"name": "w", "topology": TOPO, "agents": {"enabled": False},
            "workloads": list(workloads)}


def test_fault_and_workload_kinds_are_registries_of_one_shape():
    for registry in (fault_kinds.KINDS, kinds.KINDS):
        assert isinstance(registry, plugins.Registry)
        assert all(registry[name].NAME == name for name in registry)
    assert set(kinds.KINDS) == {"command", "iperf3", "replay", "elephants"}


def test_a_registry_refuses_what_is_not_of_its_base(plugins_load):
    with pytest.raises(ParamError) as err:
        kinds.KINDS.resolve("json:loads", "workloads[0].kind")
    assert err.value.reason == "json:loads is not a testbed.workloads.kinds.WorkloadKind"
    with pytest.raises(ParamError) as err:
        kinds.KINDS.resolve("nope", "workloads[0].kind")
    assert "unknown workload kind 'nope' (known: command, iperf3" in err.value.reason


def test_an_unknown_kind_names_the_field_and_the_choices():
    with pytest.raises(ConfigError) as err:
        parse(scenario({"kind": "ping", "host": "n0"}))
    assert err.value.field == "workloads[0].kind"
    assert "'elephants'" in err.value.reason and "'package.module:Class'" in err.value.reason


def test_a_kind_of_ones_own_is_loaded_by_a_run_and_its_params_checked(plugins_load):
    sc = parse(scenario({"kind": ECHO, "host": "n1", "at_s": 1, "params": {"to": 3}}))
    entry, = sc.variants[0].workloads
    assert entry["kind"] == ECHO and entry["host"] == 1
    assert entry["params"] == {"to": 3, "count": 20, "interval_ms": 10.0, "size": 64,
                               "timeout_ms": 500.0}
    assert kinds.KINDS["udp_echo"].__module__ == "examples.workloads.udp_echo"
    for params, field in [({"to": 1}, "workloads[0].params.to"),  # itself
                          ({"to": 3, "count": 0}, "workloads[0].params.count"),
                          ({"to": 3, "burst": 5}, "workloads[0].params.burst"),
                          ({}, "workloads[0].params.to")]:
        with pytest.raises(ConfigError) as err:
            parse(scenario({"kind": ECHO, "host": "n1", "params": params}))
        assert err.value.field == field, str(err.value)
    kinds.KINDS.forget("udp_echo")


def test_validation_finds_a_kind_of_ones_own_and_loads_nothing(tmp_path):
    import sys

    path = tmp_path / "w.yaml"
    path.write_text(f"name: w\ntopology: {TOPO}\nagents: {{enabled: false}}\n"
                    f"workloads:\n  - {{kind: '{ECHO}', host: n0, params: {{to: 3}}}}\n")
    sys.modules.pop("examples.workloads.udp_echo", None)
    _, said = validate(path)
    assert "examples/workloads/udp_echo.py" in said and "not loaded" in said
    assert "examples.workloads.udp_echo" not in sys.modules
    path.write_text(path.read_text().replace("UdpEcho", "UdpEhco"))
    with pytest.raises(ConfigError) as err:
        validate(path)
    assert err.value.field == "workloads[0].kind" and "defines no 'UdpEhco'" in err.value.reason


def test_one_iperf3_launcher_for_every_experiment():
    """The workload kinds, the backbone's replication and MACsec's bulk flow: no other
    module spells an iperf3 command line."""
    spelled = [str(p.relative_to(REPO)) for p in (REPO / "testbed").rglob("*.py")
               if any(f'"iperf3", "-{o}"' in p.read_text() for o in "sc")]
    assert spelled == ["testbed/workloads/iperf3.py"]
    assert iperf3.client("10.0.0.2", 5201, seconds=2, parallel=4)[-2:] == ["-P", "4"]


class _SlowHost:
    """A host whose processes take a while to start (a loaded machine), run in place."""

    name = "n0"

    def spawn(self, name, argv, **kw):
        import time

        from testbed.host.procs import Helper
        time.sleep(0.5)
        return Helper(name, argv, **kw)


def test_a_run_waits_for_an_entry_whose_processes_are_still_starting(tmp_path):
    """An entry counts as started once its processes exist: wait() polled in the moment
    between the start and its processes (a client still being spawned) and ended the run
    before the client ran (the flaky routing-mode example)."""
    import time
    from contextlib import ExitStack
    from types import SimpleNamespace

    from topologies.leafspine import build_fabric
    spec = build_fabric(prefix="tbunit0", planes=1, nodes=2)
    fabric = SimpleNamespace(spec=spec, host=lambda name: _SlowHost())
    entry = {"kind": "command", "host": 0, "argv": ["sleep", "0.3"], "at_s": 0.0}
    with ExitStack() as stack:
        run = kinds.ExtraWorkloads(fabric, [entry], out=tmp_path, pid_dir=tmp_path / "pids",
                                   stack=stack, seed=1, duration_s=10)
        run.start(time.time())
        run.wait(time.time() + 10)
        item, = run.items
        assert item.procs and not item.procs[0].alive()
        rec, = run.stop()
    assert rec["started"] and rec["exit_status"] == 0 and "error" not in rec


def test_an_entry_that_could_not_start_says_why(tmp_path):
    import time
    from contextlib import ExitStack
    from types import SimpleNamespace

    from testbed.errors import HostError
    from topologies.leafspine import build_fabric

    class Broken:
        def spawn(self, *a, **kw):
            raise HostError("n0: no such namespace")

    spec = build_fabric(prefix="tbunit0", planes=1, nodes=2)
    fabric = SimpleNamespace(spec=spec, host=lambda name: Broken())
    entry = {"kind": "command", "host": 0, "argv": ["true"], "at_s": 0.0}
    with ExitStack() as stack:
        run = kinds.ExtraWorkloads(fabric, [entry], out=tmp_path, pid_dir=tmp_path / "pids",
                                   stack=stack, seed=1, duration_s=10)
        run.start(time.time())
        run.wait(time.time() + 5)
        rec, = run.stop()
    assert rec["started"] and rec["error"] == "HostError: n0: no such namespace"
