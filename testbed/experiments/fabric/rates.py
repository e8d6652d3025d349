"""Every rate of a fabric scenario scaled by one factor, so that a smaller host carries it.

The shipped scenarios are the lab's fabrics with "every rate divided alike" (links of
20 Mb/s where a real fabric has 400 Gb/s), and :func:`scale` divides them once more, all
by the same factor, so the ratios a lesson rests on hold: a flow at 75 % of a host link
stays at 75 %, an oversubscribed uplink stays a quarter of its leaf's downlinks, an
elephant threshold stays the same share of the link.

Scaled (Mb/s and packets a second, wherever the scenario sets them: its sections, each
variant's overrides and ``workloads`` entries):

* ``topology.link_mbps`` and an explicit topology's ``links[].mbps``;
* ``training.rate_mbps`` and its DCQCN rates (``rai_mbps``, ``rhai_mbps``,
  ``min_rate_mbps``), in the section and in ``workloads`` entries of kind training;
* ``controller.adaptive.elephant_mbps`` (a threshold expressed as a rate);
* ``faults[].rate_mbps`` (the ``rate`` and ``throttle`` faults);
* ``workloads[]``: an iperf3's ``rate_mbps``, a replay's ``pps`` and ``mbps``.

Left as they are, following the scenarios' convention: sizes in bytes (``queue_kb``:
"64 KB, 26 ms at 20 Mb/s"; ECN and PFC thresholds, class buffers, the collective's
``bytes`` and ``payload``, the MTU), since a queue's behaviour is set by the frames it
holds (the Hedera reproduction ran 10 Mb/s links with the same 64 KB queues); fractions
of a rate (``oversubscription``, ECN's ``drain``, acceptance's ``rate_fraction``); times
(timeouts, intervals, fault times, the duration); counts (chains in flight, ranks,
queue pairs); and a plug-in's own ``params``. So a transfer takes 1/factor as long:
times the scenario sets relative to a transfer (``training.step_timeout_ms``) get less
slack, which is why the factor has a floor (:data:`MIN_FACTOR`).
"""

from __future__ import annotations

import copy
from typing import Any

from testbed.errors import ConfigError

#: the smallest factor :func:`scale` accepts (below it a scenario's timeouts, set for
#: transfers at its own rates, no longer hold a step's data)
MIN_FACTOR = 0.05

#: rate fields by section: a key, or a nested section's key (``dcqcn.rai_mbps``)
SECTION_RATES: dict[str, tuple[str, ...]] = {
    "topology": ("link_mbps",),
    "training": ("rate_mbps", "dcqcn.rai_mbps", "dcqcn.rhai_mbps", "dcqcn.min_rate_mbps"),
    "controller": ("adaptive.elephant_mbps",),
}
#: rate fields of a ``workloads`` entry, by its kind
WORKLOAD_RATES: dict[str, tuple[str, ...]] = {
    "training": SECTION_RATES["training"],
    "iperf3": ("rate_mbps",),
    "replay": ("pps", "mbps"),
}
FAULT_RATES = ("rate_mbps",)


def _scale_key(section: Any, dotted: str, factor: float) -> None:
    """Scale ``section[a][b]`` for ``dotted`` ``a.b`` where it is set to a number."""
    *parents, key = dotted.split(".")
    for part in parents:
        if not isinstance(section, dict):
            return
        section = section.get(part)
    if isinstance(section, dict):
        value = section.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            section[key] = round(value * factor, 6)


def _scale_sections(holder: dict, factor: float) -> None:
    """The rate fields of the sections (or a variant's overrides of them) in ``holder``."""
    for name, fields in SECTION_RATES.items():
        section = holder.get(name)
        if not isinstance(section, dict):
            continue
        for dotted in fields:
            _scale_key(section, dotted, factor)
        if name == "topology" and isinstance(section.get("links"), list):
            for cable in section["links"]:
                _scale_key(cable, "mbps", factor)
    faults = holder.get("faults")
    for fault in faults if isinstance(faults, list) else ():
        for dotted in FAULT_RATES:
            _scale_key(fault, dotted, factor)
    loads = holder.get("workloads")
    for entry in loads if isinstance(loads, list) else ():
        if isinstance(entry, dict):
            for dotted in WORKLOAD_RATES.get(entry.get("kind"), ()):
                _scale_key(entry, dotted, factor)


def scale(data: dict, factor: float) -> dict:
    """A copy of the scenario document ``data`` with every rate multiplied by ``factor``
    (see the module's docstring for which fields); validate the result as any scenario.

    >>> doc = {"name": "x", "topology": {"link_mbps": 20, "queue_kb": 64},
    ...        "training": {"rate_mbps": 15, "bytes": 2000000},
    ...        "variants": [{"name": "a"}, {"name": "b", "topology": {"link_mbps": 10}}]}
    >>> out = scale(doc, 0.5)
    >>> out["topology"], out["training"], out["variants"][1]["topology"]
    ({'link_mbps': 10.0, 'queue_kb': 64}, {'rate_mbps': 7.5, 'bytes': 2000000}, {'link_mbps': 5.0})
    >>> doc["topology"]["link_mbps"]  # the document itself is left as it was
    20
    """
    if not MIN_FACTOR <= factor <= 1:
        raise ConfigError("--fit", f"a rate factor from {MIN_FACTOR} to 1, got {factor!r}")
    out = copy.deepcopy(data)
    if factor == 1:
        return out
    _scale_sections(out, factor)
    variants = out.get("variants")
    for variant in variants if isinstance(variants, list) else ():
        if isinstance(variant, dict):
            _scale_sections(variant, factor)
    return out
