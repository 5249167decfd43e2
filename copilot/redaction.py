"""Contact emails and phone numbers, found and redacted (pure): the one definition the PII
middleware applies before every model call and the trace masking applies to what LangSmith
receives.

The rules (``RedactionRule``: a type, its detector, what replaces a match) are our own, so
that traces and feedback comments are masked by the same definition (``redact_pii``).

Email addresses are found by our own pattern (``detect_email``), a superset of LangChain's
ASCII one that also reads internationalised addresses: Unicode local parts in any script,
IDN domains in Unicode or punycode (``name@bücher.example``, ``name@xn--bcher-kva.example``),
full-width forms, and addresses a URL or JSON carries escaped (``%40``, ``\\u00e9``).

Phone numbers are found by Google's libphonenumber (the ``phonenumbers`` package), whose
metadata knows every country's numbering plan, rather than by hand-written shapes that
missed national formats. Three narrow rules cover what the library cannot see: 7-digit
NANP local numbers (no area code, so never "valid"), NANP-formatted numbers with
fictional area codes, and vanity numbers spelt with letters.
"""

from __future__ import annotations

import html
import re
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache, lru_cache, partial
from typing import Literal

import phonenumbers
import regex
from langchain.agents.middleware import PIIMatch
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


# --- email addresses ------------------------------------------------------------------------

# Email addresses, internationalised ones included (RFC 6531 local parts, IDNA domains).
# The pattern is written with Unicode properties (the ``regex`` package: the standard
# ``re`` has no ``\p{..}``, and its ``\w`` leaves out combining marks, so a Devanagari,
# Tamil or Thai local part would be cut at its first vowel sign). It is a superset of
# LangChain's ASCII ``detect_email`` (``[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}``):
# the same shape, with every script's letters, marks and digits where that has ASCII ones.
#
# No validator judges the candidates: a validator can only drop one, and what it drops the
# model reads. email-validator refuses special-use domains (``.test``, ``.local``),
# over-long parts and dot rules; IDNA refuses labels that break its context and bidi rules;
# each of those is still a person's address as written in a CRM. The shape decides, as it
# did for ASCII addresses, and the negatives (mentions, decorators, versions, paths) are
# what the shape already excludes: no local part, no dot in the domain, or no letter TLD.
_AT_SIGNS = "@＠﹫"  # full-width and small commercial at: a Japanese or Chinese IME types them
_DOTS = ".。．｡"  # the label separators UTS #46 reads as a dot (ideographic, full-width, half-width)
# Local part: letters, marks and digits of any script, connector punctuation (``_``), format
# characters (ZWJ/ZWNJ, which some scripts need), and the ASCII pattern's ``.%+-``, plus an
# apostrophe (``o'brien``; a leading one is a quote and is left out of the match) and the
# full-width ``．＋－`` an IME types.
_LOCAL = r"\p{L}\p{M}\p{N}\p{Pc}\p{Cf}.%+'\-．＋－"
_LABEL = r"\p{L}\p{M}\p{N}\u200c\u200d\-－"
_WORD = r"\p{L}\p{M}\p{N}\p{Pc}"
# The TLD: two or more letters of any script (``中国``, ``рф``, ``भारत``), or punycode.
_TLD = r"(?:[xX][nN]--[a-zA-Z0-9-]*[a-zA-Z0-9]|\p{L}[\p{L}\p{M}]+)"
# A domain name has at most 253 characters (RFC 1035), so the scan after an at-sign is bounded
# too: a run of "a.a.a…" cannot make a message's redaction slow.
_DOMAIN = rf"[{_LABEL}{_DOTS}]{{1,253}}[{_DOTS}]{_TLD}"
# An address is found from its at-sign: the local part is the run of local characters just
# before it (read backwards, never into the previous address), the domain is matched just
# after it, and the closing lookahead is the ASCII pattern's ``\b``. One pass over the
# text, however long its words are.
_AT = regex.compile(rf"[{_AT_SIGNS}]")
_LOCAL_BEFORE = regex.compile(rf"[{_LOCAL}]++", regex.REVERSE)
_DOMAIN_AFTER = regex.compile(rf"{_DOMAIN}(?![{_WORD}])")
_WHOLE_DOMAIN = regex.compile(_DOMAIN)
_QUOTE = "'"
_MAX_QUOTED_LOCAL = 64  # octets of a local part (RFC 5321); characters here

# What a reader decodes without thinking, so an address written through it is still an
# address: URL percent-encoding (``maria%40b%C3%BCcher.example`` in a query string or
# userinfo), JSON string escapes (a CRM's JSON with non-ASCII as ``\u00e9``), and HTML
# character references (``&#64;``, ``&commat;``). Addresses are found in the decoded text
# and each match is mapped back to the characters that wrote it.
_ESCAPES = regex.compile(
    r"(?P<percent>(?:%[0-9A-Fa-f]{2})+)|(?P<unicode>(?:\\u[0-9A-Fa-f]{4})+)|(?P<json>\\[\"\\/bfnrt])"
    r"|(?P<entity>&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});)"
)
_JSON_ESCAPES = {'"': '"', "\\": "\\", "/": "/", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t"}


@dataclass(frozen=True)
class _Decoded:
    """Text as its reader reads it, and where each decoded character was written.

    ``pieces`` are ``(decoded start, original start, original end, verbatim)``: a verbatim
    piece maps character for character; any other piece is what one escape decoded to (a
    character, or two for a few HTML entities), written from ``original start`` to
    ``original end``.
    """

    text: str
    pieces: tuple[tuple[int, int, int, bool], ...]
    starts: tuple[int, ...]  # each piece's decoded start, for bisection

    def span(self, start: int, end: int) -> tuple[int, int]:
        """The original span that wrote decoded characters ``start`` to ``end`` (exclusive)."""
        first = self.pieces[bisect_right(self.starts, start) - 1]
        last = self.pieces[bisect_right(self.starts, end - 1) - 1]
        begin = first[1] + (start - first[0] if first[3] else 0)
        finish = last[1] + (end - last[0] if last[3] else last[2] - last[1])
        return begin, finish


def _percent_chars(run: str) -> list[tuple[str, int, int]]:
    """Percent-encoded UTF-8 as ``(character, start, end)`` within ``run``; bytes that are
    not UTF-8 stay as written."""
    data = bytes(int(run[i + 1 : i + 3], 16) for i in range(0, len(run), 3))
    out: list[tuple[str, int, int]] = []
    i = 0
    while i < len(data):
        lead = data[i]
        size = 1 if lead < 0x80 else 2 if lead >> 5 == 0b110 else 3 if lead >> 4 == 0b1110 else 4
        try:
            char = data[i : i + size].decode("utf-8")
        except UnicodeDecodeError:
            out += [(c, 3 * i + k, 3 * i + k + 1) for k, c in enumerate(run[3 * i : 3 * i + 3])]
            i += 1
            continue
        out.append((char, 3 * i, 3 * (i + size)))
        i += size
    return out


def _unicode_chars(run: str) -> list[tuple[str, int, int]]:
    """JSON ``\\uXXXX`` escapes (surrogate pairs joined) as ``(character, start, end)``."""
    units = [int(run[i + 2 : i + 6], 16) for i in range(0, len(run), 6)]
    out: list[tuple[str, int, int]] = []
    i = 0
    while i < len(units):
        unit = units[i]
        if 0xD800 <= unit < 0xDC00 and i + 1 < len(units) and 0xDC00 <= units[i + 1] < 0xE000:
            out.append((chr(0x10000 + ((unit - 0xD800) << 10) + units[i + 1] - 0xDC00), 6 * i, 6 * i + 12))
            i += 2
            continue
        char = chr(unit) if not 0xD800 <= unit < 0xE000 else run[6 * i : 6 * i + 6]  # a lone surrogate stays
        out.append((char, 6 * i, 6 * i + 6))
        i += 1
    return out


def _escape_chars(escape: regex.Match[str]) -> list[tuple[str, int, int]]:
    """What one escape decodes to, as ``(text, start, end)`` relative to the escape."""
    written = escape.group(0)
    if escape.group("percent"):
        return _percent_chars(written)
    if escape.group("unicode"):
        return _unicode_chars(written)
    if escape.group("json"):
        return [(_JSON_ESCAPES[written[1]], 0, 2)]
    return [(html.unescape(written), 0, len(written))]


def _decoded(text: str) -> _Decoded:
    parts: list[str] = []
    pieces: list[tuple[int, int, int, bool]] = []
    at, length = 0, 0
    for escape in _ESCAPES.finditer(text):
        if escape.start() > at:
            pieces.append((length, at, escape.start(), True))
            parts.append(text[at : escape.start()])
            length += escape.start() - at
        for char, start, end in _escape_chars(escape):
            verbatim = char == escape.group(0)[start:end]
            pieces.append((length, escape.start() + start, escape.start() + end, verbatim))
            parts.append(char)
            length += len(char)
        at = escape.end()
    pieces.append((length, at, len(text), True))
    parts.append(text[at:])
    return _Decoded("".join(parts), tuple(pieces), tuple(p[0] for p in pieces))


def _consistent_domain(domain: str) -> str:
    """``domain`` cut before the first separator unlike its first one, when that leaves a domain.

    An address uses one kind of dot; CJK text puts an ideographic full stop right after it
    ("…@例子.中国。谢谢"), which would otherwise read as one more label.
    """
    separators = [(i, c) for i, c in enumerate(domain) if c in _DOTS]
    first = separators[0][1]
    for i, c in separators:
        if c != first and _WHOLE_DOMAIN.fullmatch(domain[:i]):
            return domain[:i]
    return domain


def _quoted_local(text: str, floor: int, at: int) -> str:
    """The RFC 5322 quoted local part (``"josé garcía"``) ending at ``at``, or ``""``.

    One line, at most 64 characters, no inner quote, with a letter or digit and no
    whitespace at its edges: JSON's ``"key":"@..."`` is not one.
    """
    if at - 1 < floor or text[at - 1] != '"':
        return ""
    opening = text.rfind('"', floor, at - 1)
    inner = text[opening + 1 : at - 1]
    plausible = 0 < len(inner) <= _MAX_QUOTED_LOCAL and inner == inner.strip() and "\n" not in inner
    return text[opening:at] if opening >= 0 and plausible and any(c.isalnum() for c in inner) else ""


def _email_spans(text: str) -> list[tuple[int, int]]:
    spans: list[tuple[int, int]] = []
    floor = 0  # where the previous address ended
    for at in _AT.finditer(text):
        local = _LOCAL_BEFORE.match(text, floor, at.start())
        # A leading apostrophe is a quote around the address ('maria@acme.example'), not
        # part of it; quotes alone are no local part.
        unquoted = local.group().lstrip(_QUOTE) if local else _quoted_local(text, floor, at.start())
        domain = _DOMAIN_AFTER.match(text, at.end()) if unquoted else None
        if domain is None:
            continue
        start = at.start() - len(unquoted)
        floor = at.end() + len(_consistent_domain(domain.group()))
        spans.append((start, floor))
    return spans


def detect_email(text: str) -> list[PIIMatch]:
    """Email addresses in ``text``, ASCII and internationalised, as the model must not see them.

    Unicode local parts in any script, IDN domains in Unicode or punycode (and a punycode
    TLD), full-width and ideographic forms, in sentences of any language, quotes, brackets,
    display names, ``mailto:`` links, query strings and URL userinfo, and quoted local parts
    (``"josé garcía"@bücher.example``); written plainly or
    through percent-encoding, JSON ``\\u`` escapes or HTML character references (the match
    then covers the escaped characters). Every ASCII address LangChain's ``detect_email``
    finds is inside a match, with the same span for ordinary addresses (wider where our
    local part is: ``o'brien@...``). Text without an at-sign in any form is returned
    without matches at once.
    """
    if not any(c in text for c in _AT_SIGNS) and not any(c in text for c in "%\\&"):
        return []
    decoded = _decoded(text) if any(c in text for c in "%\\&") else None
    view = decoded.text if decoded is not None else text
    if not any(c in view for c in _AT_SIGNS):
        return []
    spans = _email_spans(view)
    if decoded is not None:
        spans = [decoded.span(s, e) for s, e in spans]
    return [PIIMatch(type="email", value=text[s:e], start=s, end=e) for s, e in spans]


STRATEGY: Literal["redact"] = "redact"
"""What the model (and a trace) sees instead of a match: ``[REDACTED_EMAIL]``, ``[REDACTED_PHONE_NUMBER]``."""
REDACTED_PREFIX = "[REDACTED_"
"""How every placeholder of :data:`STRATEGY` starts: a tool argument holding one names nothing."""

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


# What is redacted, in this order: emails (``detect_email``), then phone numbers
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
