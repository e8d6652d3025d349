"""Topology builders of your own, named in a scenario as ``builder: package.module:Class``."""
