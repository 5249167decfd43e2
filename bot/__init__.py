"""The Teams bot: activity handling, Adaptive Cards, SSO and streaming. Imports ``copilot`` only."""
