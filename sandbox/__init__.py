"""Stand-ins for the systems the product cannot reach here.

The CRM (with its MCP server), an Entra-like identity provider and a Graph-like
drafts mailbox. The product talks to this package only over the network.
"""
