"""The backbone experiment kind: an FRR backbone of PoPs and regions, its faults and probes."""
