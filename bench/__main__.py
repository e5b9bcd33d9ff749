"""``python -m bench COMMAND``: the research benchmarks (``make bench``)."""

import sys

from bench.cli import main

sys.exit(main())
