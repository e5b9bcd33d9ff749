"""Research benchmarks of voxpipe, kept out of the product package.

They measure the server the way an experiment does (fresh servers, engines alone beside the
pipeline, a round-robin cluster as a baseline), so they may import anything in ``voxpipe``,
and ``voxpipe`` never imports them (an import-linter contract in ``pyproject.toml``). Run them
with ``python -m bench COMMAND`` (``make bench``). ``voxpipe load``, the operator's capacity
search, is product and lives in ``voxpipe/loadtest/``.
"""
