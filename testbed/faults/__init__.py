"""Faults: the timed schedule, the fault kinds of a fabric and their actions, the probes
of a run, and the accounting of what each fault did."""
