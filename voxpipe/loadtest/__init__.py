"""``voxpipe load``: the operator's load generator and capacity search.

Product, not research: an operator sizes a machine with it (docs/deploy.md, "Sizing"). The
research benchmarks reuse its callers, statistics and server handling from the top-level
``bench`` package; nothing here imports that package.
"""
