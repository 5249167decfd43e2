"""``python -m sandbox``: the sandbox command line."""

from sandbox.cli import main

raise SystemExit(main())
