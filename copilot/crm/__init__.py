"""The CRM connector: everything CRM-specific, behind one seam.

* :mod:`copilot.crm.types`: the typed writer interface (:class:`~copilot.crm.types.CrmWriter`)
  and the pydantic models that cross it;
* :mod:`copilot.crm.reference`: the sandbox CRM's own MCP tools (the only module that names them);
* :mod:`copilot.crm.dataverse`: Dynamics 365 Sales through the Dataverse Web API v9.2;
* :mod:`copilot.vocabulary`: the CRM's stages, activity types and editable fields;
* :mod:`copilot.crm.connector`: ``CRM_KIND`` → the writer, the vocabulary loader, doctor's list.

This package's ``__init__`` imports nothing, so the schemas can read the vocabulary without
pulling the MCP client in.
"""
