"""Reports and plots: the Markdown report and its figures, variants and runs side by side,
the topology drawing, the grading of lab guides."""
