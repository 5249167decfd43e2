"""Contact emails and phone numbers never reach the model.

LangChain's ``PIIMiddleware`` redacts them in the rep's input and in tool results
before each model call. Tools that need an address (drafts) resolve the contact by
record id inside the CRM instead.
"""

from __future__ import annotations

import re
from typing import Any

from langchain.agents.middleware import PIIMiddleware
from langchain.agents.middleware._redaction import PIIMatch

_CANDIDATE = re.compile(r"(?<![\w.-])(?:\+|\()?\d[\d\s().-]{5,20}\d(?![\w-])")
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")
_NANP = re.compile(r"^\(?\d{3}\)?[\s.-]\d{3}[\s.-]\d{4}$")


def detect_phone_numbers(text: str) -> list[PIIMatch]:
    """Phone numbers in ``text``: international (+...), bracketed area codes or NANP shapes.

    Dates, amounts and record ids are not phone numbers: a match needs 7-15 digits and
    a telephone shape, and ISO dates are skipped.
    """
    matches: list[PIIMatch] = []
    for found in _CANDIDATE.finditer(text):
        value = found.group(0).strip()
        digits = sum(c.isdigit() for c in value)
        if not 7 <= digits <= 15 or _ISO_DATE.match(value):
            continue
        if value.startswith("+") or value.startswith("(") or _NANP.match(value):
            start = found.start() + (len(found.group(0)) - len(found.group(0).lstrip()))
            matches.append(PIIMatch(type="phone_number", value=value, start=start, end=start + len(value)))
    return matches


def pii_middleware() -> list[PIIMiddleware[Any, Any]]:
    """Email and phone redaction on input and tool results."""
    return [
        PIIMiddleware("email", strategy="redact", apply_to_input=True, apply_to_tool_results=True),
        PIIMiddleware(
            "phone_number",
            detector=detect_phone_numbers,
            strategy="redact",
            apply_to_input=True,
            apply_to_tool_results=True,
        ),
    ]
