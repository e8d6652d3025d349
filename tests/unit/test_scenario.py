"""Scenario validation: every shipped scenario is valid; bad ones name the field."""

from __future__ import annotations

import copy
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from testbed.core.scenario import load, parse
from testbed.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
DEFAULT = REPO / "scenarios" / "agents-vs-training.yaml"


def base() -> dict:
    return yaml.safe_load(DEFAULT.read_text())


@pytest.mark.parametrize("path", sorted((REPO / "scenarios").glob("*.yaml")), ids=lambda p: p.stem)
def test_shipped_scenarios_are_valid(path):
    load(path)


def test_default_scenario_has_the_three_variants():
    sc = load(DEFAULT)
    assert [v.name for v in sc.variants] == ["agents-only", "training-1to1", "training-4to1"]
    over = [v.topology["oversubscription"] for v in sc.variants]
    assert over == [1, 1, 4]
    assert [v.training["enabled"] for v in sc.variants] == [False, True, True]
    # same hosts and link rates in every variant: only the uplinks change
    specs = [v.fabric("tb0000") for v in sc.variants]
    assert len({(s.nodes, s.link_mbps, s.planes) for s in specs}) == 1
    assert specs[2].params["uplink_mbps"] * 4 == specs[1].params["uplink_mbps"]


def mutate(path: str, value):
    data = base()
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node[int(k)] if isinstance(node, list) else node.setdefault(k, {})
    node[keys[-1]] = value
    return data


@pytest.mark.parametrize(
    ("path", "value", "field"),
    [
        ("name", "Bad Name!", "name"),
        ("duration_s", 0, "duration_s"),
        ("topology.planes", 0, "topology.planes"),
        ("topology.nodes", 7, "topology.nodes"),
        ("topology.oversubscription", "lots", "topology.oversubscription"),
        ("topology.link_mbps", -5, "topology.link_mbps"),
        ("topology.colour", "red", "topology.colour"),
        ("controller.mode", "magic", "controller.mode"),
        ("agents.driver", 99, "agents.driver"),
        ("agents.concurrency", 0, "agents.concurrency"),
        ("training.ranks", [0], "training.ranks"),
        ("training.payload", 9000, "training.payload"),
        ("variants.2.topology.oversubscription", 0.5, "variants[2].topology.oversubscription"),
        ("variants.1.training.ranks", [0, 0], "variants[1].training.ranks"),
        ("variants.1.name", "agents-only", "variants[1].name"),
        ("surprise", 1, "surprise"),
    ],
)
def test_bad_field_is_named(path, value, field):
    with pytest.raises(ConfigError) as err:
        parse(mutate(path, value))
    assert err.value.field == field


def test_missing_service_is_named():
    data = base()
    del data["agents"]["services"]["tool"]
    with pytest.raises(ConfigError) as err:
        parse(data)
    assert err.value.field == "agents.services.tool"


def test_variant_override_does_not_leak_into_base():
    data = base()
    before = copy.deepcopy(data)
    parse(data)
    assert data == before


def test_validate_cli_one_line_exit_2_and_nothing_created(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(mutate("topology.spines_per_plane", -1)))
    before = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "validate", str(bad)],
                          capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "topology.spines_per_plane" in lines[0]
    # other runs on a shared host may change links meanwhile: only our absence is checked
    after = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    assert not _names(after) - _names(before) - _live_names()


def _names(links: str) -> set[str]:
    return {line.split(":")[1].strip().split("@")[0] for line in links.splitlines()}


def _live_names() -> set[str]:
    """Names of links that live runs (other tests, other labs) may create meanwhile."""
    from testbed.host.naming import live_runs, run_prefix

    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True).stdout
    return {n for n in _names(out) for r in live_runs() if n.startswith(run_prefix(r))}


def test_validate_runs_no_program_and_opens_no_netlink(tmp_path, monkeypatch, capsys):
    """Pure: a bad file is refused, and a good one accepted, without any process or
    netlink socket (so nothing on the host can change)."""
    import pyroute2

    from testbed.core.cli import main

    def refuse(*args, **kwargs):
        raise AssertionError(f"validate touched the host: {args[:1]}")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(pyroute2, "IPRoute", refuse)
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump(mutate("topology.spines_per_plane", -1)))
    assert main(["validate", str(bad)]) == 2
    assert main(["validate", str(DEFAULT)]) == 0


def test_validate_cli_accepts_the_default(capsys):
    from testbed.core.cli import main

    assert main(["validate", str(DEFAULT)]) == 0
    assert "3 variants" in capsys.readouterr().out


@pytest.mark.parametrize("text", ["name: [unclosed", "- just\n- a list\n"])
def test_malformed_yaml_is_one_line(tmp_path, text, capsys):
    from testbed.core.cli import main

    f = tmp_path / "x.yaml"
    f.write_text(text)
    assert main(["validate", str(f)]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_run_with_bad_duration_exits_2_before_touching_the_host(capsys):
    from testbed.core.cli import main

    assert main(["run", "agents-vs-training", "--duration", "abc"]) == 2
    assert "DURATION" in capsys.readouterr().err
    assert main(["run", "no-such-scenario"]) == 2


def test_seeds_from_the_command_line_replace_the_files():
    sc = load(REPO / "scenarios" / "ecn-tuning.yaml", seeds_override=[4, 5, 6])
    assert sc.run_seeds == (4, 5, 6) and sc.experiment.seeds == (4, 5, 6)
    assert load(REPO / "scenarios" / "ecn-tuning.yaml").run_seeds == (1, 2, 3)
    for bad, field in (([4, 4], "seeds"), ([-1], "seeds"), ([], "seeds")):
        with pytest.raises(ConfigError) as err:
            load(DEFAULT, seeds_override=bad)
        assert err.value.field.startswith(field), err.value
    done = subprocess.run([sys.executable, "-m", "testbed.core.cli", "run", str(DEFAULT),
                           "--seeds", "1,x"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 2 and done.stderr.strip().count("\n") == 0, done.stderr
    assert "SEEDS" in done.stderr


def test_variants_picked_from_the_command_line_run_alone(capsys):
    """``testbed run --variant``: the picked variants in the file's order, each once; an
    unknown name or a kind whose summary compares its variants is refused before the
    host is touched."""
    from testbed.core.cli import main

    sc = load(DEFAULT)
    names = [v.name for v in sc.variants]
    picked = sc.only([names[2], names[0], names[2]])
    assert [v.name for v in picked.variants] == [names[0], names[2]]
    assert picked.picked == (names[0], names[2]) and sc.variants == sc.experiment.variants
    with pytest.raises(ConfigError) as err:
        sc.only(["nope"])
    assert err.value.field == "--variant" and names[0] in err.value.reason
    with pytest.raises(ConfigError) as err:
        load(REPO / "scenarios" / "macsec.yaml").only(["protected"])
    assert "runs all its variants together" in err.value.reason
    assert main(["run", str(DEFAULT), "--variant", "nope"]) == 2
    assert "--variant" in capsys.readouterr().err


def test_queue_pairs_are_checked():
    data = yaml.safe_load((REPO / "scenarios" / "qp-scaling.yaml").read_text())
    assert parse(copy.deepcopy(data)).variants[2].training["qps"] == 8
    for training, reason in (({"qps": 0}, "must be 1 or more"),
                             ({"qps": 65}, "65"),
                             ({"qps": 4, "spray": True}, "spray already rotates")):
        bad = copy.deepcopy(data)
        bad["variants"][1]["training"] = training
        with pytest.raises(ConfigError) as err:
            parse(bad)
        assert err.value.field == "variants[1].training.qps", err.value
        assert reason in str(err.value), err.value
