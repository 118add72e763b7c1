"""Measured results: each benchmark is a module run from the repository root, e.g.
``python -m bench.vit`` or ``python -m bench.translate --timings-only``; results go to
``bench/results/``."""
