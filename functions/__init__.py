"""Azure Functions blueprints (Python v2 programming model). Imports ``bot`` and ``copilot``."""
