"""The benchmarks: one module a bench, each run from the checkout as ``python -m evals.bench.<name>``.

What each measures, how long it takes and which doc holds its figures: evals/README.md ("Benchmarks").
Shared parser, paths, resume caches and tables: ``evals.bench.common``.
"""
