"""Command-line tools: the demo, scene inspection, benchmarks, backend and preset comparisons,
recording scenes with Drake or MuJoCo and validating implementations against recordings."""
