"""The copilot: agent, tools, middleware, persistence, runner and CLI.

Nothing here imports the Teams bot, the Azure Functions layer or the sandbox.
"""
