"""Agent-chain plans: validation of the runner's plan JSON and a default plan.

A plan names the services (one address per plane) and the chain templates::

    {"services": {"retriever": [["10.0.0.2", 7001], ["10.1.0.2", 7001]], ...},
     "chains": [{"name": "rag", "weight": 3,
                 "steps": [{"service": "retriever", "request": 1024,
                            "reply": 32768, "service_us": 0}, ...]}]}

``weight`` defaults to 1 and ``service_us`` to 0. Unknown keys, missing
services, negative or oversized numbers are rejected with ``PlanError`` naming
the field (e.g. ``chains[0].steps[1].request``) so a bad runner config fails
loudly instead of silently measuring something else.
"""

from __future__ import annotations

import ipaddress
import math
from typing import Any

from traffic.agent_protocol import MAX_BYTES, MAX_HOP, MAX_SERVICE_US

KB = 1024


class PlanError(ValueError):
    """An invalid plan; ``field`` is the JSON path of the offending value."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


def _keys(obj: Any, field: str, required: set[str], optional: set[str]) -> dict:
    if not isinstance(obj, dict):
        raise PlanError(field, f"must be an object, got {type(obj).__name__}")
    for key in obj:
        if key not in required | optional:
            raise PlanError(f"{field}.{key}" if field else key, "unknown key")
    for key in sorted(required):
        if key not in obj:
            raise PlanError(f"{field}.{key}" if field else key, "missing")
    return obj


def _int(value: Any, field: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(field, f"must be an integer, got {value!r}")
    if value < low:
        raise PlanError(field, f"must be >= {low}, got {value}")
    if value > high:
        raise PlanError(field, f"must be <= {high}, got {value}")
    return value


def address(value: Any, field: str) -> tuple[str, int]:
    """``[ip, port]`` checked (:class:`PlanError` naming ``field``)."""
    if not isinstance(value, list | tuple) or len(value) != 2:
        raise PlanError(field, f"must be [ip, port], got {value!r}")
    host, port = value
    if not isinstance(host, str):
        raise PlanError(f"{field}[0]", f"must be an IP address string, got {host!r}")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise PlanError(f"{field}[0]", f"not an IP address: {host!r}") from None
    return host, _int(port, f"{field}[1]", 1, 65535)


def validate_plan(plan: Any) -> dict:
    """Check ``plan`` and return a normalised copy (defaults filled, tuples for addresses)."""
    _keys(plan, "", {"services", "chains"}, set())
    services_in = plan["services"]
    if not isinstance(services_in, dict) or not services_in:
        raise PlanError("services", "must be a non-empty object")
    services: dict[str, list[tuple[str, int]]] = {}
    for name, addrs in services_in.items():
        field = f"services.{name}"
        if not isinstance(addrs, list) or not addrs:
            raise PlanError(field, "must be a non-empty list of [ip, port]")
        services[name] = [address(a, f"{field}[{i}]") for i, a in enumerate(addrs)]
    chains_in = plan["chains"]
    if not isinstance(chains_in, list) or not chains_in:
        raise PlanError("chains", "must be a non-empty list")
    chains = []
    names: set[str] = set()
    for i, chain in enumerate(chains_in):
        field = f"chains[{i}]"
        _keys(chain, field, {"name", "steps"}, {"weight"})
        name = chain["name"]
        if not isinstance(name, str) or not name:
            raise PlanError(f"{field}.name", "must be a non-empty string")
        if name in names:
            raise PlanError(f"{field}.name", f"duplicate template name {name!r}")
        names.add(name)
        weight = chain.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise PlanError(f"{field}.weight", f"must be a number, got {weight!r}")
        if not math.isfinite(weight) or weight <= 0:
            raise PlanError(f"{field}.weight", f"must be > 0, got {weight}")
        steps_in = chain["steps"]
        if not isinstance(steps_in, list) or not steps_in:
            raise PlanError(f"{field}.steps", "must be a non-empty list")
        if len(steps_in) > MAX_HOP + 1:
            raise PlanError(f"{field}.steps", f"at most {MAX_HOP + 1} steps")
        steps = [_step(s, f"{field}.steps[{j}]", services) for j, s in enumerate(steps_in)]
        chains.append({"name": name, "weight": weight, "steps": steps})
    return {"services": services, "chains": chains}


def _step(step: Any, field: str, services: dict) -> dict:
    _keys(step, field, {"service", "request", "reply"}, {"service_us"})
    service = step["service"]
    if not isinstance(service, str) or service not in services:
        raise PlanError(f"{field}.service", f"unknown service {service!r}")
    return {
        "service": service,
        "request": _int(step["request"], f"{field}.request", 0, MAX_BYTES),
        "reply": _int(step["reply"], f"{field}.reply", 0, MAX_BYTES),
        "service_us": _int(step.get("service_us", 0), f"{field}.service_us", 0, MAX_SERVICE_US),
    }


def _s(service: str, request_kb: float, reply_kb: float) -> dict:
    return {"service": service, "request": int(request_kb * KB), "reply": int(reply_kb * KB),
            "service_us": 0}


# Sizes: ~4 bytes per token. A model request carries the prompt plus context
# (4-20 KB = 1k-5k tokens, growing as a chain accumulates tool output and
# retrieved text); its reply is generated text or a tool call (1-4 KB). A
# retriever gets a short query (1 KB) and returns top-k chunks (8 x 4 KB =
# 32 KB). A tool gets a JSON call (2 KB) and returns an API result (8 KB). An
# agent hop is a peer agent exchanging a short plan or result (2 KB / 2 KB).
# service_us is 0 so latency is network + stack; the runner may add compute.
_TEMPLATES = [
    ("rag", 3, [_s("agent", 1, 1), _s("retriever", 1, 32), _s("model", 8, 2)]),
    ("tool-use", 2, [
        _s("model", 4, 1), _s("tool", 2, 8), _s("model", 12, 1),
        _s("tool", 2, 8), _s("model", 20, 2),
    ]),
    ("multi-agent", 1, [
        _s("agent", 2, 2), _s("retriever", 1, 32), _s("model", 8, 2), _s("agent", 2, 2),
        _s("tool", 2, 8), _s("model", 12, 2), _s("agent", 2, 2), _s("model", 16, 4),
    ]),
]


def default_plan(services: dict[str, list[tuple[str, int]]]) -> dict:
    """Return a plan with the realistic templates whose services all exist in ``services``.

    Templates: rag (3 hops), tool-use (5 hops), multi-agent (8 hops), weights 3:2:1.
    """
    chains = [
        {"name": name, "weight": weight, "steps": [dict(s) for s in steps]}
        for name, weight, steps in _TEMPLATES
        if all(s["service"] in services for s in steps)
    ]
    if not chains:
        raise ValueError("no template fits services " + ", ".join(sorted(services)))
    plan = {
        "services": {k: [[host, port] for host, port in v] for k, v in services.items()},
        "chains": chains,
    }
    validate_plan(plan)
    return plan
