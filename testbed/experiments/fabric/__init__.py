"""The fabric experiment kind: its section schema, its run, its report."""
