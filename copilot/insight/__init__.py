"""Insight computed from the rep's own CRM reads, with no model call: deals at risk
(:mod:`copilot.insight.risk`) and what changed since the rep last looked
(:mod:`copilot.insight.catchup`). Like briefs, every fact cites the records behind it."""
