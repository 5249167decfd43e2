"""``python -m bench``: the bench's command line (:mod:`bench.cli`)."""

from bench.cli import main

raise SystemExit(main())
