"""Command-line tools: the demo, scene inspection, benchmarks, backend and preset comparisons,
step inspection and the viewer, recording scenes with Drake or MuJoCo and validating
implementations against recordings."""
