"""Workloads: the generators of a fabric variant and the agent chains."""
