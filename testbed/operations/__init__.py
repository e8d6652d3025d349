"""Operations during a run: node health measured on real frames, and degraded nodes
replaced by spares.

* :mod:`.health` -- every watched NIC probed to its leaf and back, its error counters,
  and the rule that declares a node degraded;
* :mod:`.replace` -- the ``replacement:`` section: a declared node drained, its agent
  services moved to a spare while the chains go on.
"""
