"""Backbone topologies of your own, named in a scenario as
``backbone.topology: package.module:Class``."""
