"""The agent's tools: CRM reads over MCP, typed write tools, drafts and preferences."""
