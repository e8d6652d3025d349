"""Example scenarios and builders (run from the repository's top folder)."""
