"""Command-line tools: the demo, scene inspection, benchmarks, backend and preset comparisons."""
