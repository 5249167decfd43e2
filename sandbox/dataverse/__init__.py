"""A Dataverse-compatible face of the sandbox CRM, over the same seeded organisation.

Two surfaces, both under the org URL's audience (``SandboxSettings.org_url``):

* ``/api/data/v9.2/``: a Web API subset (OData queries, ETags, alternate-key upsert,
  ``@odata.bind``, metadata, Dataverse's error shape and throttling);
* ``/api/mcp``: the Dataverse MCP tool surface (``search``, ``describe``, ``read_query``,
  ``search_data``, ``create_record``, ``update_record``, ``delete_record``).

Records are the sandbox's own rows (``sandbox.db``), seen through deterministic GUIDs
(:mod:`sandbox.dataverse.ids`) and the sandbox's access rules, so a write through any
surface is visible in every other one and in ``python -m sandbox export``.
"""
