"""``python -m evals``: the eval's command line (:mod:`evals.cli`)."""

from evals.cli import main

raise SystemExit(main())
