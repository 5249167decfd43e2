"""``python -m copilot analytics``: approve / edit / reject rates from the audit and rejections.

``queries.py`` (the SQL, pure text, and the read), ``report.py`` (rates, edit deltas and the
text tables, pure), ``command.py``.
"""
