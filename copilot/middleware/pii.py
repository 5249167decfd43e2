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

_EXTENSION = r"(?:\s*(?:x|ext\.?|extension)\s*\d{1,6})?"
# Each alternative is a whole telephone shape, so a number just before a phone (a date,
# a count) can never swallow it into one candidate that then fails the shape test.
_PHONE = re.compile(
    r"(?<![\w+])(?:"
    r"\+\d{1,3}(?:[\s.-]?\(?\d{1,4}\)?){2,5}"  # +44 20 7946 0958, +1 (415) 555-0133
    r"|\(\d{2,4}\)[\s.-]?\d{3,4}[\s.-]?\d{3,4}"  # (206) 555 0199
    r"|\d{3}[\s.-]\d{3}[\s.-]\d{4}"  # 415-555-0100, 415.555.0100
    r")" + _EXTENSION + r"(?![\w-])",
    re.IGNORECASE,
)
_ISO_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}")


def detect_phone_numbers(text: str) -> list[PIIMatch]:
    """Phone numbers in ``text``: international (+...), bracketed area codes, NANP shapes.

    Dates, amounts and record ids are not phone numbers: a match needs a telephone
    shape and 7-15 digits (extensions aside), and ISO dates are skipped.
    """
    matches: list[PIIMatch] = []
    for found in _PHONE.finditer(text):
        value = found.group(0)
        main = re.split(r"(?i)\s*(?:x|ext\.?|extension)\s*", value)[0]
        digits = sum(c.isdigit() for c in main)
        if not 7 <= digits <= 15 or _ISO_DATE.match(value):
            continue
        matches.append(PIIMatch(type="phone_number", value=value, start=found.start(), end=found.end()))
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
