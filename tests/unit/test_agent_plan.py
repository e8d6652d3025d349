"""Plan validation: every bad field is named; the CLI exits 2 with one stderr line."""

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from traffic.agent_plan import PlanError, default_plan, validate_plan
from traffic.agents import main

REPO = Path(__file__).resolve().parents[1]
SERVICES = {name: [("10.0.0.2", 7001 + i), ("10.1.0.2", 7001 + i)]
            for i, name in enumerate(["agent", "retriever", "tool", "model"])}


def test_default_plan_is_valid_and_realistic():
    plan = default_plan(SERVICES)
    assert validate_plan(json.loads(json.dumps(plan)))
    names = {c["name"]: c for c in plan["chains"]}
    assert set(names) == {"rag", "tool-use", "multi-agent"}
    for chain in plan["chains"]:
        assert 3 <= len(chain["steps"]) <= 8
    rag = [(s["service"], s["request"], s["reply"]) for s in names["rag"]["steps"]]
    assert ("retriever", 1024, 32768) in rag and ("model", 8192, 2048) in rag


def test_default_plan_skips_templates_without_services():
    plan = default_plan({k: SERVICES[k] for k in ("agent", "retriever", "model")})
    assert [c["name"] for c in plan["chains"]] == ["rag"]
    with pytest.raises(ValueError):
        default_plan({"tool": SERVICES["tool"]})


def _bad(edit):
    plan = copy.deepcopy(default_plan(SERVICES))
    plan["services"] = {k: [list(a) for a in v] for k, v in plan["services"].items()}
    edit(plan)
    return plan


CASES = [
    (lambda p: p.pop("services"), "services"),
    (lambda p: p.update(extra=1), "extra"),
    (lambda p: p["chains"][0]["steps"][1].update(service="nope"), "chains[0].steps[1].service"),
    (lambda p: p["chains"][1]["steps"][0].update(request=-5), "chains[1].steps[0].request"),
    (lambda p: p["chains"][0]["steps"][0].update(reply="big"), "chains[0].steps[0].reply"),
    (lambda p: p["chains"][0]["steps"][0].update(service_us=-1), "chains[0].steps[0].service_us"),
    (lambda p: p["chains"][0]["steps"][0].update(bogus=1), "chains[0].steps[0].bogus"),
    (lambda p: p["chains"][0]["steps"][0].pop("reply"), "chains[0].steps[0].reply"),
    (lambda p: p["chains"][0].update(weight=0), "chains[0].weight"),
    (lambda p: p["chains"][0].update(steps=[]), "chains[0].steps"),
    (lambda p: p["chains"][2].update(name="rag"), "chains[2].name"),
    (lambda p: p["services"]["tool"][1].__setitem__(1, 70000), "services.tool[1][1]"),
    (lambda p: p["services"]["tool"][0].__setitem__(0, "host"), "services.tool[0][0]"),
    (lambda p: p["services"].update(model=[]), "services.model"),
    (lambda p: p.update(chains=[]), "chains"),
]


@pytest.mark.parametrize("edit, field", CASES)
def test_validate_names_field(edit, field):
    with pytest.raises(PlanError) as info:
        validate_plan(_bad(edit))
    assert info.value.field == field


@pytest.mark.parametrize("edit, field", CASES[:4])
def test_cli_exit_2(tmp_path, capsys, edit, field):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(_bad(edit)))
    rc = main(["agent-driver", "--plan", str(plan), "--hops-out", str(tmp_path / "h"),
               "--chains-out", str(tmp_path / "c"), "--chains", "1"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    assert len(err) == 1 and field in err[0], err
    assert not (tmp_path / "h").exists()


def test_cli_exit_2_subprocess(tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text("{not json")
    proc = subprocess.run(
        [sys.executable, "-m", "traffic", "agent-driver", "--plan", str(plan), "--hops-out",
         str(tmp_path / "h"), "--chains-out", str(tmp_path / "c"), "--chains", "1"],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=30,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "plan" in lines[0] and "invalid JSON" in lines[0]
