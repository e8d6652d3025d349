"""A fabric over several machines: placement and sizing."""
