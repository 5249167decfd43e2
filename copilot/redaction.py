"""Contact emails and phone numbers, found and redacted (pure): the one definition the PII
middleware applies before every model call and the trace masking applies to what LangSmith
receives.

The rules (``RedactionRule``: a type, its detector, what replaces a match) are our own, so
that traces and feedback comments are masked by the same definition (``redact_pii``).

Phone numbers are found by Google's libphonenumber (the ``phonenumbers`` package), whose
metadata knows every country's numbering plan, rather than by hand-written shapes that
missed national formats. Three narrow rules cover what the library cannot see: 7-digit
NANP local numbers (no area code, so never "valid"), NANP-formatted numbers with
fictional area codes, and vanity numbers spelt with letters.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache, partial
from typing import Literal

import phonenumbers
from langchain.agents.middleware import PIIMatch
from langchain.agents.middleware.pii import detect_email
from phonenumbers import Leniency, PhoneMetadata, PhoneNumberMatcher

DEFAULT_REGION = "US"

# National formats are region-specific: "020 7946 0958" is only a number to a GB parser.
# Contacts abroad are common, so these regions' national formats are looked for whatever
# the home region is. Spain is left out on purpose: its 9-digit plan makes a US ZIP+4
# ("98052-6399") a valid Spanish number.
COMMON_REGIONS = ("US", "GB", "DE", "FR", "IN", "AU")

# VALID (the number exists in the region's plan) rather than POSSIBLE (right length only):
# POSSIBLE accepts dates, amounts and version numbers as GB or DE numbers. Not
# STRICT_GROUPING either: it misses mis-grouped numbers people really write
# ("+44 207 946 0958").
_LENIENCY = Leniency.VALID

# Where the matcher is worth running: a run of digits and phone punctuation. Parsing is
# the expensive part (every date and amount is a candidate, in every region), so runs
# with too few digits to be a number with its area code, and bare ISO dates, are skipped.
_RUN = re.compile(r"[+＋(\[]*\d[\d\s()\[\].\-/~‐-―−ー－／]*")
_MIN_RUN_DIGITS = 6  # Germany's shortest fixed-line number with its trunk prefix
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2})?")
# Context the matcher needs around a run: the character before (a letter there means
# "part of a word") and, after it, an extension ("ext. 123456") or a time (":30"), cut
# at the next field or clause so the next number is not parsed again with this one.
_BEFORE, _AFTER = 2, 24
_TAIL_END = re.compile(r"[,;\"'{}\[\]<>|\n]")
_GROUP_START = re.compile(r"(?<!\d)\d")

# A bare digit run shorter than a NANP number with its area code ("1234567", "0012345")
# is an amount, an id or a count far more often than a phone, whatever its prefix; so is
# a decimal ("120000.50").
_MIN_BARE_DIGITS = 10
_DECIMAL = re.compile(r"\d+[.,]\d{1,2}")
# A national-format match opening with a year and a space ("in 2026 150000") is a year
# followed by a count: no numbering plan writes a 4-digit group first without a prefix.
_YEAR_FIRST = re.compile(r"(?:19|20)\d{2}\s")

_EXT = r"(?:\s*(?:x|ext\.?|extension)\s*\d{1,6})?"
# NANP numbers written with separators, which libphonenumber rejects when the area code
# is fictional ("555-555-0100") and a non-NANP home region does not look for nationally;
# and 7-digit local numbers ("555-0144"), which have no area code and are never "valid".
# The local form needs a dash (a space or dot would take "won 250 2025 deals" and the
# price "250.5000"), and neither form may touch a word, a currency sign or more digits.
_NANP = re.compile(
    r"(?<![\w+.,/:$€£-])"
    r"(?:\(?[2-9]\d{2}\)?[\s.-]?[2-9]\d{2}[\s.-]\d{4}|[2-9]\d{2}-\d{4})" + _EXT + r"(?![\w-]|[.,]\d)",
    re.IGNORECASE,
)
# Vanity numbers ("1-800-FLOWERS", "1 (888) GET-HELP", "1-877-CALL-ATT"): the matcher
# only reads digits. Toll-free area codes only, after a separated country code, in
# brackets, or with a dash ("800-FLOWERS", never "800 BROADWAY", an address). Then seven
# letters or digits (dashes anywhere between them) with at least one letter; a few
# trailing letters are allowed, as in "1-800-CONTACTS". Letters must be capitals unless
# the whole number is dash-joined from its country code ("1-800-Flowers"), so "1855
# Microsoft Way" and "toll-free 800 numbers" stay.
_TOLL_FREE = r"8(?:00|33|44|55|66|77|88)"
_VANITY = re.compile(
    r"(?<![\w+-])(?:(?:\+1[\s.-]?|1[\s.-])\(?" + _TOLL_FREE + r"\)?[\s.-]?"
    r"|\(" + _TOLL_FREE + r"\)\s?|" + _TOLL_FREE + r"-)"
    r"(?P<word>(?=[0-9A-Z-]*[A-Z])[0-9A-Z](?:-?[0-9A-Z]){6}[A-Z]{0,4})(?![\w-])",
    re.IGNORECASE,
)
_DASH_JOINED = re.compile(r"\+?1-" + _TOLL_FREE + "-")


@cache
def _prefixes(region: str) -> tuple[str, ...]:
    """The region's trunk prefix and plain international prefix (``0``, ``00``; ``1``, ``011``)."""
    metadata = PhoneMetadata.metadata_for_region(region)
    if metadata is None:
        return ()
    found = [metadata.national_prefix, metadata.international_prefix]
    return tuple(p for p in found if p and p.isdigit())


@cache
def _regions(home: str) -> tuple[str, ...]:
    return (home, *(r for r in COMMON_REGIONS if r != home))


def _accepted(raw: str, region: str, home: str) -> bool:
    """Whether a number the matcher found in ``region`` counts, with ``home`` configured.

    International numbers always count. A national format from another region counts
    only with that region's prefix ("020 ...", "0049 ..."): a bare "9876543210" is an
    Indian mobile number to an Indian parser but an amount to a US tenant.
    """
    if raw.startswith(("+", "＋")):
        return True
    if (raw.isdigit() and len(raw) < _MIN_BARE_DIGITS) or _DECIMAL.fullmatch(raw):
        return False
    digits = "".join(c for c in raw if c.isdigit())
    if digits.startswith(_prefixes(region)):
        return True
    return region == home and _YEAR_FIRST.match(raw) is None


def _worth_parsing(core: str, region: str, home: str) -> bool:
    """Whether ``_accepted`` could take anything the matcher finds in ``core`` for ``region``.

    Parsing is the cost, so this mirrors ``_accepted`` on the whole run: a short bare run
    is never a number, and another region needs one of its prefixes at the start of a
    digit group.
    """
    if (core.isdigit() and len(core) < _MIN_BARE_DIGITS) or _DECIMAL.fullmatch(core):
        return False
    return region == home or _group_starts_with(core, _prefixes(region))


def _group_starts_with(core: str, prefixes: tuple[str, ...]) -> bool:
    return any(core.startswith(prefixes, g.start()) for g in _GROUP_START.finditer(core))


def _ordered_regions(core: str, home: str) -> tuple[str, ...]:
    """The regions to parse ``core`` in, likeliest first (the first full explanation wins).

    Every region reads "+44 ..." alike, so an international run needs only one. A run
    opening with a region's prefix ("020 ...") is tried there before the home region.
    """
    regions = _regions(home)
    if core.startswith(("+", "＋")):
        return regions[:1]
    first = core.lstrip("+＋([")  # a run is its opening brackets, then a digit
    prefixed = tuple(r for r in regions if first.startswith(_prefixes(r)))
    return prefixed + tuple(r for r in regions if r not in prefixed)


def _library_spans(text: str, home: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    for run in _RUN.finditer(text):
        core = run.group(0).rstrip()
        if sum(c.isdigit() for c in core) < _MIN_RUN_DIGITS or _ISO_DATE.fullmatch(core):
            continue
        offset = max(0, run.start() - _BEFORE)
        end = run.start() + len(core)
        tail = text[end : end + _AFTER]
        cut = _TAIL_END.search(tail)
        window = text[offset : end + (cut.start() if cut else len(tail))]
        lead = run.start() - offset
        found = _cached_run_spans if len(window) <= _CACHED_WINDOW else _run_spans
        spans += [(offset + s, offset + e) for s, e in found(window, lead, len(core), home)]
    return spans


def _run_spans(window: str, lead: int, core_len: int, home: str) -> tuple[tuple[int, int], ...]:
    """Numbers in one run, ``window[lead : lead + core_len]``, as spans within ``window``."""
    core = window[lead : lead + core_len]
    digits = [lead + i for i, c in enumerate(core) if c.isdigit()]
    first, last = digits[0], digits[-1]
    spans: list[tuple[int, int]] = []
    for region in _ordered_regions(core, home):
        if not _worth_parsing(core, region, home):
            continue
        for found in PhoneNumberMatcher(window, region, leniency=_LENIENCY):
            # The window's context may hold the start of a neighbouring run; it has its own.
            if lead <= found.start <= last and _accepted(found.raw_string, region, home):
                spans.append((found.start, found.end))
        # Once one region explains every digit of the run, the others cannot add any.
        if spans and min(s for s, _ in spans) <= first and max(e for _, e in spans) > last:
            break
    return tuple(spans)


# The same text is scanned again before every model call of a run (the rep's message, the
# latest tool results), and a contact list repeats an account's switchboard number.
_CACHED_WINDOW = 128
_cached_run_spans = lru_cache(maxsize=4096)(_run_spans)


def _rule_spans(text: str) -> list[tuple[int, int]]:
    spans = [(m.start(), m.end()) for m in _NANP.finditer(text)]
    for m in _VANITY.finditer(text):
        if _DASH_JOINED.match(m.group(0)) or not any(c.islower() for c in m.group("word")):
            spans.append((m.start(), m.end()))
    return spans


def detect_phone_numbers(text: str, region: str = DEFAULT_REGION) -> list[PIIMatch]:
    """Phone numbers in ``text``, in every common national and international format.

    ``region`` (ISO 3166 alpha-2) is the home region for national formats; international
    numbers (``+44 ...``, ``0049 ...``) and the national formats of ``COMMON_REGIONS`` are
    found whatever it is. Dates, times, amounts, years, versions, counts, record ids and
    street addresses are not phone numbers. Overlapping finds are merged, so each number
    is one match covering all of its digits (and its extension).
    """
    home = region.upper()
    spans = sorted(_library_spans(text, home) + _rule_spans(text))
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start < merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return [PIIMatch(type="phone_number", value=text[s:e], start=s, end=e) for s, e in merged]


STRATEGY: Literal["redact"] = "redact"
"""What the model (and a trace) sees instead of a match: ``[REDACTED_EMAIL]``, ``[REDACTED_PHONE_NUMBER]``."""

Detector = Callable[[str], list[PIIMatch]]


@dataclass(frozen=True)
class RedactionRule:
    """One PII type: how it is found, and ``STRATEGY`` for what replaces each match."""

    pii_type: str
    detector: Detector
    strategy: Literal["redact"] = STRATEGY

    def apply(self, text: str) -> str:
        """``text`` with every match replaced by ``[REDACTED_<TYPE>]``, exactly as
        ``PIIMiddleware``'s ``redact`` strategy replaces it (last match first)."""
        for match in sorted(self.detector(text), key=lambda m: m["start"], reverse=True):
            text = f"{text[: match['start']]}[REDACTED_{match['type'].upper()}]{text[match['end'] :]}"
        return text


def home_region(phone_region: str) -> str:
    home = phone_region.upper()
    if home not in phonenumbers.SUPPORTED_REGIONS:
        raise ValueError(f"unknown phone region {phone_region!r} (an ISO 3166 alpha-2 code, e.g. 'US')")
    return home


# What is redacted, in this order: emails (LangChain's own email detector), then phone numbers
# in the email-redacted text (so the digits of an address are never read as a number). The
# one definition that both the middleware and ``redact_pii`` apply.
@cache
def redaction_rules(home: str) -> tuple[RedactionRule, ...]:
    return (
        RedactionRule("email", detect_email),
        RedactionRule("phone_number", partial(detect_phone_numbers, region=home)),
    )


def redact_pii(text: str, phone_region: str = DEFAULT_REGION) -> str:
    """``text`` as the model would see it: the middleware's rules, in its order, applied
    outside the agent (traces, feedback comments)."""
    for rule in redaction_rules(home_region(phone_region)):
        text = rule.apply(text)
    return text
