"""``python -m copilot``: the command line."""

from copilot.cli import main

raise SystemExit(main())
