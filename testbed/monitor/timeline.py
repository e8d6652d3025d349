"""The last minutes of a lab, a point a second, and what happened on them (faults,
controller decisions, links going down and up): what the dashboard's charts draw.

>>> tl = Timeline(seconds=3)
>>> for t in range(5):
...     tl.add(float(t), {"chains": t})
>>> tl.event(4.0, "fault", "link_down n0-p0l0")
>>> view = tl.view(since=2.5)
>>> [p["t"] for p in view["points"]], view["events"][0]["text"]
([3.0, 4.0], 'link_down n0-p0l0')
>>> [p["t"] for p in tl.view()["points"]]
[2.0, 3.0, 4.0]
"""

from __future__ import annotations

from collections import deque


class Timeline:
    def __init__(self, seconds: int = 600, events: int = 1000) -> None:
        self.points: deque[dict] = deque(maxlen=seconds)
        self.events: deque[dict] = deque(maxlen=events)

    def add(self, t: float, values: dict) -> None:
        self.points.append({"t": round(t, 3), **values})

    def event(self, t: float, kind: str, text: str) -> None:
        self.events.append({"t": round(t, 3), "kind": kind, "text": text})

    def view(self, since: float = 0.0) -> dict:
        """Points and events after ``since`` (a time the page already has)."""
        return {"points": [p for p in self.points if p["t"] > since],
                "events": [e for e in self.events if e["t"] > since]}
