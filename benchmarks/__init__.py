"""Measuring and report code, kept out of the library: each module runs as `python -m benchmarks.<name>` from the
repository root and writes its JSON records to benchmarks/results/ (what they measure: docs/benchmarks.md)."""
