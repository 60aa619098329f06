"""The repository's evidence tooling, apart from the library and from the benchmarks that measure: the archive of
trained models (results/), the results and comparison tables written from it and from reports/, the check that every
committed figure is what its evidence gives (`make check`), the recorded commands it runs, the call tracer behind
docs/code.md, and the prose density of the code (prose.py). Each module runs as `python -m tools.<name>` from the
repository root; nothing in `nmt` imports them."""
