"""The storage experiment kind: caches, checkpoints, replication."""
