"""The generic fault schedule engine."""

from __future__ import annotations

import time

import pytest

from testbed.errors import ConfigError, HostError
from testbed.faults.schedule import Fault, Schedule


def test_runs_in_time_order_with_timestamps():
    seen = []
    faults = [Fault(0.10, "restore", "a"), Fault(0.05, "cut", "a")]
    sched = Schedule(faults, {"cut": lambda t: seen.append(("cut", t, time.time())),
                              "restore": lambda t: seen.append(("restore", t, time.time()))})
    t0 = time.time()
    records = sched.run(t0)
    assert [s[0] for s in seen] == ["cut", "restore"]
    for rec in records:
        assert rec.ok and rec.started >= rec.planned
        assert rec.planned == pytest.approx(t0 + rec.at_s)
        assert 0 <= rec.lateness_ms < 50
        assert rec.done >= rec.started


def test_failed_action_is_recorded_and_schedule_goes_on():
    def boom(target: str) -> None:
        raise HostError(f"cannot cut {target}")

    records = Schedule([Fault(0, "cut", "x"), Fault(0, "ok", "y")],
                       {"cut": boom, "ok": lambda t: t}).run()
    assert not records[0].ok and "cannot cut x" in records[0].error
    assert records[1].ok and records[1].result == "y"


@pytest.mark.parametrize("error", [ValueError("embedded null byte"), NotImplementedError(),
                                   OverflowError("cannot convert float infinity"),
                                   KeyError("x")])
def test_a_plugins_bug_is_recorded_and_the_later_faults_still_run(error):
    def buggy(target: str) -> None:
        raise error

    sched = Schedule([Fault(0, "bug", "x"), Fault(0.01, "ok", "y")],
                     {"bug": buggy, "ok": lambda t: t})
    sched.start()  # in its thread, as in a run
    sched.join(5)
    first, second = sched.records
    assert not first.ok and first.error.startswith(type(error).__name__)
    assert second.ok and second.result == "y"


def test_hooks_and_stop():
    calls = []
    sched = Schedule([Fault(0, "a", "1"), Fault(30, "a", "2")], {"a": lambda t: None},
                     before=lambda r: calls.append(("before", r.target)),
                     after=lambda r: calls.append(("after", r.target)))
    sched.start()
    time.sleep(0.1)
    sched.stop()
    sched.join(2)
    assert calls == [("before", "1"), ("after", "1")]
    assert len(sched.records) == 1


def test_a_slow_before_hook_runs_ahead_and_does_not_delay_the_fault():
    """A hook slower than its lead (a routing snapshot that took twice the last one under
    software emulation fired a cut 1.3 s late): the fault still fires on time, after the
    hook started, and ``after`` sees the hook done."""
    for lead in (0.0, 0.1, 0.5):
        seen: list[tuple[str, float]] = []

        def slow(rec, seen=seen) -> None:
            seen.append(("before", time.time()))
            time.sleep(0.3)
            seen.append(("before done", time.time()))

        def fault(target, seen=seen) -> None:
            seen.append(("fault", time.time()))

        rec, = Schedule([Fault(0.6, "a", "1")], {"a": fault}, before=slow,
                        before_lead_s=lead,
                        after=lambda r, seen=seen: seen.append(("after", time.time()))).run()
        assert 0 <= rec.lateness_ms < 50, (lead, rec.lateness_ms)
        order = [name for name, _ in seen]
        assert order.index("before") < order.index("fault"), (lead, order)
        assert order.index("before done") < order.index("after"), (lead, order)


def test_unknown_action_is_a_config_error():
    with pytest.raises(ConfigError) as err:
        Schedule([Fault(0, "explode", "x")], {"cut": lambda t: None})
    assert err.value.field == "faults[0].action"


def test_loss_passed_as_second_argument():
    got = []
    Schedule([Fault(0, "degrade", "x", 0.25), Fault(0, "restore", "x")],
             {"degrade": lambda t, loss: got.append((t, loss)),
              "restore": lambda t: got.append((t, None))}).run()
    assert got == [("x", 0.25), ("x", None)]
