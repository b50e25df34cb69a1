"""Command-line tools: scene inspection now; benchmarks, backend and preset comparisons later."""
