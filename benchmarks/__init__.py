"""Measuring code, kept out of the library: each module runs as `python -m benchmarks.<name>` from the repository
root and writes its JSON records to benchmarks/results/ (what they measure: docs/benchmarks.md). The evidence
tooling that checks and tabulates committed figures is in tools/."""
