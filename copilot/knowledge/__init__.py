"""Knowledge retrieval: playbooks and product documents, chunked into PostgreSQL, searched
with full-text (and, when an embedding model is configured, vector) ranking, with each
chunk's access list matched in SQL against the rep's identity."""
