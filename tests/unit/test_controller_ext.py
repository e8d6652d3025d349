"""controller.apps and controller.remote: checked before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.core.scenario import parse
from testbed.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]


def scenario(controller: dict, **extra) -> dict:
    return {"name": "c", "topology": {"planes": 1, "nodes": 4}, "agents": {"enabled": False},
            "controller": controller, **extra}


def test_apps_and_remote_are_accepted(monkeypatch, plugins_load):
    monkeypatch.chdir(REPO)
    v, = parse(scenario({"apps": ["examples.apps.pin_flow:PinFlow"]})).variants
    assert v.controller["apps"] == ["examples.apps.pin_flow:PinFlow"]
    v, = parse(scenario({"remote": "127.0.0.1:6653"})).variants
    assert v.controller["remote"] == "127.0.0.1:6653"


@pytest.mark.parametrize("controller, field, words", [
    ({"apps": ["no.such.module"]}, "controller.apps[0]", "no module 'no'"),
    ({"apps": ["json"]}, "controller.apps[0]", "no os-ken app"),
    ({"apps": ["examples.apps.pin_flow:Nope"]}, "controller.apps[0]", "defines no 'Nope'"),
    ({"apps": ["not a module"]}, "controller.apps[0]", "must match"),
    ({"remote": "10.0.0.9:6653"}, "controller.remote", "must match"),
    ({"remote": "127.0.0.1:99999"}, "controller.remote", "1..65535"),
    ({"remote": "127.0.0.1:6653", "mode": "adaptive"}, "controller.mode", "no effect"),
    ({"remote": "127.0.0.1:6653", "fast_failover": True}, "controller.fast_failover",
     "no effect"),
    ({"remote": "127.0.0.1:6653", "apps": ["examples.apps.pin_flow"]}, "controller.apps",
     "no effect"),
])
def test_bad_controller_extensions_name_the_field(controller, field, words, monkeypatch,
                                                  plugins_load):
    monkeypatch.chdir(REPO)
    with pytest.raises(ConfigError) as err:
        parse(scenario(controller))
    assert err.value.field == field and words in err.value.reason, str(err.value)


def test_controller_faults_need_our_controller():
    with pytest.raises(ConfigError) as err:
        parse(scenario({"remote": "127.0.0.1:6653"},
                       faults=[{"at_s": 1, "action": "controller_kill"}]))
    assert err.value.field == "faults" and "controller_kill" in err.value.reason
