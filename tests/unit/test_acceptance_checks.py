"""The link and path checks' rules on made-up measurements: what passes, what fails and
what a failing path is put on."""

from __future__ import annotations

import pytest

from testbed.acceptance import links, paths
from testbed.acceptance.lldp import End
from topologies.leafspine import build_fabric

SPEC = build_fabric(prefix="tbu0", planes=1, nodes=6, leaves_per_plane=3, spines_per_plane=2)


def _measured(n: int, got: int, seconds: float, size: int = 1514, refused: int = 0):
    return links.Measured(planned=n, offered=n, refused=refused, received=got,
                          bytes=got * size, first=0.0, last=seconds, seqs=set(range(got)))


def test_a_direction_passes_at_its_rate_and_fails_below_it_or_lossy():
    d = links.Direction("l", End("a", "a1", ""), End("b", "b1", ""), 20, "a1>b1")
    assert links.verdict(d, _measured(800, 800, 0.48)) == ""
    assert "at 10.1 of 20 Mb/s" in links.verdict(d, _measured(800, 400, 0.48))
    assert "2.0 % lost" in links.verdict(d, _measured(800, 784, 0.48))
    assert links.verdict(d, _measured(800, 797, 0.48)) == ""  # 0.4 %: within the rule
    behind = links.Measured(planned=800, offered=700)
    assert "not measured" in links.verdict(d, behind)
    overrun = _measured(800, 800, 0.48)
    overrun.overrun = 3
    assert "the machine dropped 3 frames" in links.verdict(d, overrun)



class _Queue:
    """A link's egress queue in front of a packet socket, in real time: it drains at
    ``fraction`` of the link's rate except during ``stall`` (from, for: seconds after
    the first frame), holds ``queue_bytes`` and refuses a frame beyond (ENOBUFS)."""

    TRUESIZE = 9000  # what the kernel charges a frame while it waits

    def __init__(self, mbps: float, size: int, fraction: float = 1.0,
                 stall: tuple[float, float] = (0.0, 0.0), queue_bytes: int = 64000):
        self.per_s = fraction * mbps * 1e6 / 8 / size
        self.limit = queue_bytes // size
        self.stall = stall
        self.waiting = 0.0
        self.start = self.last = None
        self.taken = self.overfilled = 0

    def _drain(self) -> None:
        import time

        now = time.perf_counter()
        if self.start is None:
            self.start = self.last = now
        a, b = self.start + self.stall[0], self.start + self.stall[0] + self.stall[1]
        stalled = max(0.0, min(now, b) - max(self.last, a))
        self.waiting = max(0.0, self.waiting - (now - self.last - stalled) * self.per_s)
        self.last = now

    def queued(self) -> int:
        self._drain()
        return int(-(-self.waiting // 1)) * self.TRUESIZE  # a frame partly sent still waits

    def send(self, frame: bytes) -> int:
        import errno

        self._drain()
        if self.waiting + 1 > self.limit:
            self.overfilled += 1
            raise OSError(errno.ENOBUFS, "the queue is full")
        self.waiting += 1
        self.taken += 1
        return len(frame)


def _send_through(monkeypatch, queue: _Queue, mbps: float, size: int) -> links.Measured:
    monkeypatch.setattr(links, "_queued", lambda sock: sock.queued())
    got = links.Measured()
    links._send(queue, bytearray(size), mbps, 0.2, 64000, got)
    return got


def test_the_sender_holds_frames_while_a_stalled_queue_drains(monkeypatch):
    """A healthy link whose queue stalls 40 ms (a late timer, a busy machine): the
    sender waits for the queue instead of overfilling it, and every frame goes (the
    deadline far off: a busy test machine's late ticks are not what this asserts)."""
    monkeypatch.setattr(links, "DEADLINE", 10)
    size = links.frame_bytes(100, 9000, 0.2)
    queue = _Queue(100, size, stall=(0.05, 0.04))
    got = _send_through(monkeypatch, queue, 100, size)
    assert got.planned > 100 and got.offered == got.planned == queue.taken
    assert got.refused == 0 and queue.overfilled == 0


def test_a_slow_links_held_frames_are_its_loss(monkeypatch):
    """A link at a quarter of its rate: the sender never overfills its queue, and what it
    still holds when the time is up is lost at the sending end."""
    size = links.frame_bytes(100, 9000, 0.2)
    queue = _Queue(100, size, fraction=0.25)
    got = _send_through(monkeypatch, queue, 100, size)
    assert queue.overfilled == 0 and got.offered == got.planned
    assert got.refused == got.planned - queue.taken
    assert 0.5 < got.refused / got.planned < 0.75  # 1.5 windows at a quarter: 0.39 sent


def _paths(slow: set[str] = frozenset(), lossy_spine: str | None = None):
    """Every path of the spec with made-up probes: 0.2 ms, 5 ms on a path that crosses a
    link of ``slow``, all lost through ``lossy_spine``."""
    planned, skipped = paths.plan(SPEC, lambda i: True)
    assert skipped == []
    for p in planned:
        p.sent = 300
        through = {s for s, _ in p.hops[1:]}
        if lossy_spine in {s[len(SPEC.prefix):] for s in through}:
            continue
        delay = 0.005 if set(p.links) & slow else 0.0002
        p.delays = [delay] * 300
        p.seqs = set(range(300))
    return planned


def test_a_slow_link_is_named_by_its_paths_and_its_light_frames():
    planned = _paths(slow={"p0l0-p0s1"})
    failing = paths.judge(planned)
    assert failing and all("p0l0-p0s1" in planned[i].links for i in failing)

    def light(chosen):
        return {paths.link_name(SPEC, lk): {"latency_ms": 5.1 if paths.link_name(
            SPEC, lk) == "p0l0-p0s1" else 0.05, "loss": 0.0} for lk in chosen}

    named_links, switches, left = paths.explain(SPEC, planned, failing, light)
    assert list(named_links) == ["p0l0-p0s1"] and switches == {} and left == []


def test_a_spine_that_drops_is_named_and_no_leaf():
    planned = _paths(lossy_spine="p0s1")
    failing = paths.judge(planned)
    assert len(failing) == 6  # every ordered pair of three leaves, over p0s1

    def light(chosen):
        return {paths.link_name(SPEC, lk): {"latency_ms": 0.05, "loss": 0.0} for lk in chosen}

    named_links, switches, left = paths.explain(SPEC, planned, failing, light)
    assert named_links == {} and list(switches) == ["p0s1"] and left == []


def test_the_check_pins_each_path_with_its_own_port_at_every_switch_on_it():
    planned = _paths()
    rules = paths.flows(planned)
    assert sorted(s[len(SPEC.prefix):] for s in rules) == ["p0l0", "p0l1", "p0l2", "p0s0",
                                                           "p0s1"]
    ports = [p.port for p in planned]
    assert len(set(ports)) == len(planned) == 12
    assert all(f"tp_dst={planned[0].port}," in r for r in [rules[planned[0].hops[0][0]][0]])


def test_planted_faults_are_placed_by_the_seed_distinct_and_never_on_a_spare():
    from testbed.acceptance.step import place
    from topologies.build import build_topology, resolve

    spec = build_topology(resolve({"planes": 1, "rails": 2, "nodes": 8, "leaves_per_plane": 4,
                                   "spines_per_plane": 4, "link_mbps": 20}), "tbu1")
    plants = [{"action": "rate", "rate_fraction": 0.25}, {"action": "degrade", "loss": 0.02},
              {"action": "swap_rails"}, {"action": "throttle", "rate_fraction": 0.25}]
    spares = [6, 5, 1]
    placed = {seed: place(spec, plants, spares, seed) for seed in range(1, 6)}
    assert placed[1] == place(spec, plants, spares, 1)  # the seed decides, nothing else
    assert len({tuple(f["target"] for f in p) for p in placed.values()}) > 1
    for faults in placed.values():
        nodes = [f["target"].split("p")[0].split("-")[0] for f in faults
                 if f["target"].startswith("n")]
        assert len(nodes) == len(set(nodes))  # never two plants on one node
        assert not {"n6", "n5", "n1"} & set(nodes)
        rate, loss, swap, throttle = faults
        assert rate["rate_mbps"] == 5.0 and loss["loss"] == 0.02
        assert swap["target"].endswith("r0") and throttle["target"].endswith("r0")


def test_a_plant_that_cannot_be_placed_names_its_entry():
    import pytest

    from testbed.acceptance.step import place
    from testbed.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        place(SPEC, [{"action": "swap_rails"}], [], 1)  # one rail: nothing to swap with
    assert err.value.field == "acceptance.plant[0].target"
    with pytest.raises(ConfigError) as err:
        place(SPEC, [{"action": "rate", "target": "p0l0-p9s9"}], [], 1)
    assert err.value.field == "acceptance.plant[0].target"


def test_excluded_nodes_hand_their_roles_to_spares():
    import pytest

    from testbed.acceptance.exclude import remap
    from testbed.errors import BringUpError

    agents = {"enabled": True, "driver": 0, "services": {"retriever": 5, "tool": 2,
                                                         "model": 7, "agent": 4}}
    training = {"enabled": True, "ranks": [0, 1, 2, 3]}
    a, t, moves = remap(agents, training, [2, 3], [6, 5, 1])
    assert a["services"]["tool"] == 6 and t["ranks"] == [0, 1, 6]
    assert moves == {"n2": "n6", "n3": None}  # 5 and 1 are busy; rank 3 dropped
    with pytest.raises(BringUpError, match="runs the driver"):
        remap(agents, training, [0, 6], [6])


def test_what_acceptance_must_exclude_for_each_planted_fault():
    from testbed.acceptance.step import expected, score
    from topologies.build import build_topology, resolve

    spec = build_topology(resolve({"planes": 1, "rails": 2, "nodes": 8, "leaves_per_plane": 4,
                                   "spines_per_plane": 4, "link_mbps": 20}), "tbu2")
    planted = [{"action": "rate", "target": "p0l1-p0s2"},
               {"action": "degrade", "target": "n3-p0l1"},
               {"action": "swap_rails", "target": "n4p0r0"},
               {"action": "throttle", "target": "n7p0r0"}]
    links, nodes = expected(spec, planted)
    assert links == {"p0l1-p0s2", "n3-p0l1", "n4-p0l2", "n4-p0l3"}
    assert nodes == {"n3", "n4", "n7"}
    got = {"excluded_links": sorted(links | {"p0l0-p0s0"}), "excluded_nodes": ["n3", "n4"],
           "excluded_switches": []}
    assert score(spec, planted, got) == {
        "found": ["n3", "n3-p0l1", "n4", "n4-p0l2", "n4-p0l3", "p0l1-p0s2"],
        "missed": ["n7"], "extra": ["p0l0-p0s0"]}


def test_the_report_has_a_row_per_variant_and_seed_with_what_was_excluded_and_why():
    from testbed.experiments.fabric.report import acceptance_lines

    verdicts = {"links": [{"name": "n0-p0l0", "verdict": "excluded", "reason": "cabling: x"},
                          {"name": "n1-p0l0", "verdict": "accepted", "reason": ""}],
                "switches": [], "nodes": [{"name": "n0", "verdict": "excluded",
                                           "reason": "a cable excluded: n0-p0l0"}]}
    planted = [{"action": "swap_rails", "target": "n0p0r0"}]
    accepted = {"enabled": True, "planted": planted, "seconds": 30.1, "system": "passes",
                "verdicts": verdicts, "moved": {"n0": "n2"},
                "score": {"found": ["n0", "n0-p0l0"], "missed": [], "extra": []}}
    summary = {"runs": [
        {"name": "unaccepted", "seeds": [{"seed": 1, "acceptance": {"enabled": False,
                                                                    "planted": planted}}]},
        {"name": "accepted", "seeds": [{"seed": 1, "acceptance": accepted}]},
        {"name": "healthy", "seed": 1}]}
    lines = acceptance_lines(summary)
    assert lines[0] == "## Acceptance"
    rows = [line for line in lines if line.startswith("| ") and "---" not in line][1:]
    assert len(rows) == 2
    assert rows[0].startswith("| unaccepted | 1 | swap_rails n0p0r0 | not checked")
    assert "found 2, missed 0, beyond them 0" in rows[1]
    assert "n0-p0l0: cabling: x<br>n0: a cable excluded" in rows[1] and "n0 -> n2" in rows[1]
    assert "n1-p0l0" not in rows[1]
    assert acceptance_lines({"runs": [{"name": "x", "seed": 1}]}) == []


def test_a_scenario_schedules_a_throttle_and_refuses_a_bad_burst():
    import pytest

    from testbed.core import scenario
    from testbed.errors import ConfigError

    data = {"name": "thr", "seed": 1, "duration_s": 5,
            "topology": {"planes": 1, "nodes": 4, "leaves_per_plane": 2,
                         "spines_per_plane": 2},
            "agents": {"enabled": False}, "training": {"enabled": True, "ranks": [0, 2]},
            "faults": [{"at_s": 1, "action": "throttle", "target": "n0p0r0", "rate_mbps": 5,
                        "burst_kb": 500}]}
    fault, = scenario.parse(data).variants[0].faults
    assert (fault.action, fault.target, fault.params) == (
        "throttle", "n0p0r0", {"rate_mbps": 5.0, "burst_kb": 500.0})
    data["faults"][0]["burst_kb"] = -1
    with pytest.raises(ConfigError) as err:
        scenario.parse(data)
    assert err.value.field == "faults[0].burst_kb"
    data["faults"][0].update(burst_kb=500, target="p0l0-p0s0")  # a NIC, not a link
    with pytest.raises(ConfigError) as err:
        scenario.parse(data)
    assert err.value.field == "faults[0].target"


@pytest.mark.root  # SO_BINDTODEVICE
def test_a_retest_of_some_paths_counts_their_probes_by_path_not_by_position():
    """Probing a failing path again alone (a sublist of the plan, its index kept) counts
    every probe of it: the retest once looked paths up by position, so a path whose
    index was past the sublist's length lost all its probes (an "unexplained" path)."""
    from topologies.spec import HostInterface

    lo = HostInterface("lo", 0, 0, "127.0.0.1", 8, "", "l0", 1)
    late = paths.Path(23, 0, "l2", "l0", (), ("x",), lo, lo)
    early = paths.Path(0, 0, "l0", "l1", (), ("y",), lo, lo)
    paths.probe([late], lambda intf: None, probes=50)
    assert (late.sent, len(late.seqs)) == (50, 50) and late.loss() == 0.0
    paths.probe([late, early], lambda intf: None, probes=20)
    assert len(early.seqs) == 20 and early.sent == 20
