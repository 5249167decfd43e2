"""Meeting prep briefs: the rep's next meetings, each with its CRM account, composed from reads."""
