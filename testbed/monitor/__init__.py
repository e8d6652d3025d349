"""Watching a lab live: a monitor process beside every lab that samples it once a second
and serves, on 127.0.0.1 only, its metrics in Prometheus's text format and a dashboard page.

* :mod:`.tail` -- JSON lines read as the lab's processes append them;
* :mod:`.fabric` -- what a fabric lab shows: every switch port's counters, queue and
  carrier (the kernel's, read over netlink), per-class queues, PFC, the controller's
  decisions, agent chains and training iterations;
* :mod:`.timeline` -- the last minutes, a point a second, and the events on them;
* :mod:`.metrics` -- the samples as Prometheus metrics (prometheus_client);
* :mod:`.server` -- ``/metrics``, the page (``/``) and its JSON (``/api/...``);
* :mod:`.__main__` -- the process: ``python -m testbed.monitor``, started by the lab.
"""
