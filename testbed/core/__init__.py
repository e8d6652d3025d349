"""The run core: the command line, scenario files and their schema, the runner, the
results folder (its layout and summary), seeds, the fidelity monitor."""
