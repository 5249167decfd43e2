"""Pure text understanding for the offline model: dates, periods, amounts, stages and names.

Everything here is a pure function of the text (and ``today``), so each rule can be
unit-tested on its own. Matching is case-insensitive and tolerant of punctuation; the
rules describe *kinds* of phrasing (a date, an amount, a name after a preposition), never
particular questions.
"""

from __future__ import annotations

import calendar
import datetime as dt
import itertools
import re
from dataclasses import dataclass

MONTHS: dict[str, int] = {
    name: number
    for number in range(1, 13)
    for name in (calendar.month_name[number].lower(), calendar.month_abbr[number].lower())
} | {"sept": 9}
WEEKDAYS: dict[str, int] = {
    name: number
    for number in range(7)
    for name in (calendar.day_name[number].lower(), calendar.day_abbr[number].lower())
} | {"tues": 1, "weds": 2, "thur": 3, "thurs": 3}
NUMBER_WORDS: dict[str, int] = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "couple of": 2,
    "three": 3,
    "few": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "eleven": 11,
    "twelve": 12,
    "fourteen": 14,
    "fifteen": 15,
    "twenty": 20,
    "thirty": 30,
    "sixty": 60,
    "ninety": 90,
}

_MONTH_RE = "|".join(sorted(MONTHS, key=len, reverse=True))
_WEEKDAY_RE = "|".join(sorted(WEEKDAYS, key=len, reverse=True))
_NUMBER_RE = r"\d{1,3}|" + "|".join(sorted(NUMBER_WORDS, key=len, reverse=True))


@dataclass(frozen=True)
class Span:
    """A value found in the text, with where it was found (so it can be masked out)."""

    value: object
    start: int
    end: int


@dataclass(frozen=True)
class Period:
    """A close-date window; ``start`` may be open (``None``) for "before <date>"."""

    start: dt.date | None
    end: dt.date
    label: str


@dataclass(frozen=True)
class Amount:
    """A money amount; ``currency`` is an ISO code when the text named one."""

    value: float
    currency: str | None


def number_value(word: str) -> int | None:
    """``"3"`` / ``"three"`` / ``"a"`` → the integer, else ``None``."""
    word = word.strip().lower()
    if word.isdigit():
        return int(word)
    return NUMBER_WORDS.get(word)


def mask(text: str, spans: list[Span]) -> str:
    """The text with every span replaced by spaces (keeps offsets of the rest stable)."""
    chars = list(text)
    for span in spans:
        for i in range(span.start, min(span.end, len(chars))):
            chars[i] = " "
    return "".join(chars)


# --- dates ---------------------------------------------------------------------------------


def add_months(day: dt.date, months: int) -> dt.date:
    """``day`` moved by whole months, clamped to the month's last day."""
    index = day.year * 12 + (day.month - 1) + months
    year, month = divmod(index, 12)
    last = calendar.monthrange(year, month + 1)[1]
    return dt.date(year, month + 1, min(day.day, last))


def month_end(day: dt.date) -> dt.date:
    """The last day of ``day``'s month."""
    return day.replace(day=calendar.monthrange(day.year, day.month)[1])


def quarter_bounds(day: dt.date, offset: int = 0) -> tuple[dt.date, dt.date]:
    """First and last day of the calendar quarter ``offset`` quarters from ``day``'s."""
    first_month = 3 * ((day.month - 1) // 3) + 1
    start = add_months(dt.date(day.year, first_month, 1), 3 * offset)
    return start, month_end(add_months(start, 2))


def _resolve_month_day(today: dt.date, month: int, day: int, year: int | None, past: bool) -> dt.date | None:
    """A month/day without a year means its next occurrence (or the last one, for the past)."""
    try:
        if year is not None:
            return dt.date(year if year > 99 else 2000 + year, month, day)
        candidate = dt.date(today.year, month, day)
    except ValueError:
        return None
    if past and candidate > today:
        return candidate.replace(year=today.year - 1)
    if not past and candidate < today:
        try:
            return candidate.replace(year=today.year + 1)
        except ValueError:  # 29 February
            return None
    return candidate


def _weekday(today: dt.date, weekday: int, qualifier: str, past: bool) -> dt.date:
    """ "next Friday" is strictly after today; "Friday" / "this Friday" is on or after today."""
    if past or qualifier == "last":
        back = (today.weekday() - weekday) % 7
        if qualifier == "last" and back == 0:
            back = 7
        return today - dt.timedelta(days=back)
    ahead = (weekday - today.weekday()) % 7
    if qualifier == "next" and ahead == 0:
        ahead = 7
    return today + dt.timedelta(days=ahead)


def _shift(today: dt.date, count: int, unit: str, sign: int) -> dt.date:
    unit = unit.lower().rstrip("s")
    if unit == "fortnight":
        unit, count = "week", 2 * count
    if unit == "quarter":
        return add_months(today, sign * 3 * count)
    if unit == "month":
        return add_months(today, sign * count)
    if unit == "year":
        return add_months(today, sign * 12 * count)
    days = count * (7 if unit == "week" else 1)
    return today + dt.timedelta(days=sign * days)


def _end_of(today: dt.date, unit: str, which: str) -> dt.date:
    offset = 1 if which == "next" else 0
    if unit == "week":
        # A business week ends on Friday.
        return today + dt.timedelta(days=(4 - today.weekday()) % 7 + 7 * offset)
    if unit == "month":
        return month_end(add_months(today.replace(day=1), offset))
    if unit == "quarter":
        return quarter_bounds(today, offset)[1]
    return dt.date(today.year + offset, 12, 31)


def _day_of_month(today: dt.date, day: int, past: bool) -> dt.date | None:
    """ "the 15th": this month's if it is still ahead (behind, for the past), else the next (previous) month's."""
    for months in (0, -1, -2) if past else (0, 1, 2):
        month = add_months(today.replace(day=1), months)
        if day > calendar.monthrange(month.year, month.month)[1]:
            continue
        candidate = month.replace(day=day)
        if (candidate <= today) if past else (candidate >= today):
            return candidate
    return None


def _start_of(today: dt.date, unit: str, which: str) -> dt.date:
    offset = 1 if which == "next" else 0
    if unit == "week":
        return today - dt.timedelta(days=today.weekday()) + dt.timedelta(days=7 * offset)
    if unit == "month":
        return add_months(today.replace(day=1), offset)
    if unit == "quarter":
        return quarter_bounds(today, offset)[0]
    return dt.date(today.year + offset, 1, 1)


_DATE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("iso", re.compile(r"\b(\d{4})-(\d{1,2})-(\d{1,2})\b")),
    ("slash", re.compile(r"\b(\d{1,2})/(\d{1,2})(?:/(\d{2,4}))?\b")),
    (
        "month_day",
        re.compile(rf"\b({_MONTH_RE})\.?\s+(\d{{1,2}})(?:st|nd|rd|th)?\b(?:,?\s+(\d{{4}})\b)?", re.I),
    ),
    (
        "day_month",
        re.compile(
            rf"\b(\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?({_MONTH_RE})\b\.?(?:,?\s+(\d{{4}})\b)?", re.I
        ),
    ),
    ("relative_day", re.compile(r"\b(today|tonight|tomorrow|yesterday|this morning|this afternoon)\b", re.I)),
    ("ordinal_day", re.compile(r"\b(?:the\s+)(\d{1,2})(?:st|nd|rd|th)\b", re.I)),
    (
        "start_of",
        re.compile(
            r"\b(?:the\s+)?(?:start|beginning|first day)\s+of\s+(?:the\s+)?(this\s+|next\s+)?(week|month|quarter|year)\b",
            re.I,
        ),
    ),
    (
        "end_of",
        re.compile(r"\b(?:the\s+)?end\s+of\s+(?:the\s+)?(this\s+|next\s+)?(week|month|quarter|year)\b", re.I),
    ),
    ("end_abbrev", re.compile(r"\b(eow|eom|eoq|eoy)\b", re.I)),
    ("in_n", re.compile(rf"\b(?:in|within)\s+(?:a\s+)?({_NUMBER_RE})\s+(days?|weeks?|months?)\b", re.I)),
    ("n_from", re.compile(rf"\b({_NUMBER_RE})\s+(days?|weeks?|months?)\s+(from now|from today|ago)\b", re.I)),
    ("in_unit", re.compile(r"\bin\s+a\s+(week|month|fortnight)\b", re.I)),
    ("next_unit", re.compile(r"\b(next|last)\s+(week|month)\b", re.I)),
    ("weekday", re.compile(rf"\b(?:(next|this|last|coming|on)\s+)?({_WEEKDAY_RE})\b\.?", re.I)),
)


def _date_from_match(kind: str, m: re.Match[str], today: dt.date, past: bool) -> dt.date | None:
    g = m.groups()
    if kind == "iso":
        try:
            return dt.date(int(g[0]), int(g[1]), int(g[2]))
        except ValueError:
            return None
    if kind == "slash":
        # US order (month/day), as the CRM's users write it.
        return _resolve_month_day(today, int(g[0]), int(g[1]), int(g[2]) if g[2] else None, past)
    if kind == "month_day":
        return _resolve_month_day(today, MONTHS[g[0].lower()], int(g[1]), int(g[2]) if g[2] else None, past)
    if kind == "day_month":
        return _resolve_month_day(today, MONTHS[g[1].lower()], int(g[0]), int(g[2]) if g[2] else None, past)
    if kind == "relative_day":
        word = g[0].lower()
        return today + dt.timedelta(days={"tomorrow": 1, "yesterday": -1}.get(word, 0))
    if kind == "end_of":
        return _end_of(today, g[1].lower(), (g[0] or "").strip().lower())
    if kind == "ordinal_day":
        return _day_of_month(today, int(g[0]), past)
    if kind == "start_of":
        return _start_of(today, g[1].lower(), (g[0] or "").strip().lower())
    if kind == "end_abbrev":
        unit = {"eow": "week", "eom": "month", "eoq": "quarter", "eoy": "year"}[g[0].lower()]
        return _end_of(today, unit, "")
    if kind == "in_n":
        count = number_value(g[0])
        return None if count is None else _shift(today, count, g[1], -1 if past else 1)
    if kind == "n_from":
        count = number_value(g[0])
        return None if count is None else _shift(today, count, g[1], -1 if g[2].lower() == "ago" else 1)
    if kind == "in_unit":
        unit = g[0].lower()
        return _shift(today, 2 if unit == "fortnight" else 1, "week" if unit == "fortnight" else unit, 1)
    if kind == "next_unit":
        return _shift(today, 1, g[1], -1 if g[0].lower() == "last" else 1)
    if kind == "weekday":
        if g[0] is None and len(g[1]) <= 3 and not g[1][0].isupper():
            return None  # "sat", "sun", "wed" in lowercase are too often ordinary words
        return _weekday(today, WEEKDAYS[g[1].lower()], (g[0] or "").lower(), past)
    return None


def find_dates(text: str, today: dt.date, *, past: bool = False) -> list[Span]:
    """Every date phrase in ``text`` resolved against ``today``.

    Future by default (the next such date on/after today: close dates); ``past=True``
    resolves to the latest such date on/before today (when an activity happened).
    Overlapping phrases keep the earliest, longest one.
    """
    found: list[Span] = []
    for kind, pattern in _DATE_PATTERNS:
        for m in pattern.finditer(text):
            if any(m.start() < s.end and s.start < m.end() for s in found):
                continue
            value = _date_from_match(kind, m, today, past)
            if value is not None:
                found.append(Span(value, m.start(), m.end()))
    return sorted(found, key=lambda s: s.start)


@dataclass(frozen=True)
class Shift:
    """A move relative to a record's own date ("slip it two weeks", "pull it in a month")."""

    count: int
    unit: str
    """``day``, ``week``, ``fortnight``, ``month``, ``quarter`` or ``year``."""
    sign: int
    """+1 later, -1 earlier."""

    def apply(self, day: dt.date) -> dt.date:
        """``day`` moved by this shift."""
        return _shift(day, self.count, self.unit, self.sign)

    def describe(self) -> str:
        """``2 weeks later``."""
        unit = self.unit if self.count == 1 else f"{self.unit}s"
        return f"{self.count} {unit} {'later' if self.sign > 0 else 'earlier'}"


_LATER_VERBS = r"push(?:ed)?|slip(?:ped|s)?|slide|delay(?:ed)?|postpone(?:d)?|extend(?:ed)?|bump(?:ed)?|mov(?:e|ed)|shift(?:ed)?|kick(?:ed)?"
_EARLIER_VERBS = r"pull(?:ed)?|bring|brought|advance(?:d)?"
_SHIFT_RE = re.compile(
    rf"(?P<pre>\b(?:in|within|by)\s+)?(?P<count>{_NUMBER_RE})\s+(?P<unit>days?|weeks?|fortnights?|months?|quarters?)\b"
    r"(?:\s+(?P<after>later|earlier|sooner|out|back|forward|from now|from today|ago))?",
    re.I,
)
_SHIFT_VERB_RE = re.compile(rf"\b(?:(?P<later>{_LATER_VERBS})|(?P<earlier>{_EARLIER_VERBS}))\b", re.I)
_EARLIER_WORDS = re.compile(r"\b(?:forward|up|in|earlier|sooner|ahead)\b", re.I)


def find_shift(text: str) -> Span | None:
    """A move of a date by an amount of time, relative to the record's own date.

    "slip it two weeks", "push the close date out a month", "pull it in by 10 days",
    "move it back a couple of weeks", "make it 3 weeks later". Needs a moving verb (or
    "later"/"earlier" after the amount). "in two weeks", "two weeks from now" and "ago"
    are dates counted from today, not moves (except "pull it in a week": earlier).
    """
    verb = _SHIFT_VERB_RE.search(text)
    for m in _SHIFT_RE.finditer(text):
        after = (m.group("after") or "").lower()
        if after in ("from now", "from today", "ago"):
            continue
        pre = (m.group("pre") or "").strip().lower()
        earlier_verb = verb is not None and verb.group("earlier") is not None
        if pre in ("in", "within") and not earlier_verb:
            continue
        if verb is None and after not in ("later", "earlier", "sooner"):
            continue
        if verb is not None and verb.start() > m.start():
            continue
        count = number_value(m.group("count"))
        if count is None or count == 0:
            continue
        between = text[verb.end() : m.start()] if verb is not None else ""
        earlier = after in ("earlier", "sooner", "forward") or (
            after not in ("later", "out", "back")
            and (earlier_verb or _EARLIER_WORDS.search(between + " " + pre) is not None)
        )
        unit = m.group("unit").lower().rstrip("s")
        return Span(Shift(count, unit, -1 if earlier else 1), m.start(), m.end())
    return None


def find_date(text: str, today: dt.date, *, past: bool = False) -> dt.date | None:
    """The first date phrase in ``text`` (see :func:`find_dates`), or ``None``."""
    dates = find_dates(text, today, past=past)
    return dates[0].value if dates and isinstance(dates[0].value, dt.date) else None


# --- periods -------------------------------------------------------------------------------


def _month_period(today: dt.date, month: int, year: int | None) -> Period:
    if year is None:
        year = today.year if month >= today.month else today.year + 1
    start = dt.date(year, month, 1)
    return Period(start, month_end(start), f"in {calendar.month_name[month]} {year}")


def find_period(text: str, today: dt.date) -> tuple[Period, Span] | None:
    """A close-date window named in ``text`` ("this quarter", "next month", "in 30 days", "Q3"...)."""
    rules: list[tuple[re.Pattern[str], str]] = [
        (
            re.compile(r"\b(this|current|next|last|previous|coming)\s+(week|month|quarter|year)\b", re.I),
            "rel",
        ),
        (re.compile(r"\b(?:in\s+|over\s+|during\s+)?(?:the\s+)?past\s+(week|month|year)\b", re.I), "past"),
        (re.compile(r"\b(today|yesterday|tomorrow)\b", re.I), "day"),
        (re.compile(r"\b(?:in\s+)?q([1-4])(?:\s*(?:of\s+)?'?(\d{2}|\d{4}))?\b", re.I), "q"),
        (
            re.compile(
                rf"\b(?:in|within|over)\s+(?:the\s+)?(?:next\s+)?({_NUMBER_RE})\s+(days?|weeks?|months?)\b"
                rf"|\bnext\s+({_NUMBER_RE})\s+(days?|weeks?|months?)\b",
                re.I,
            ),
            "next_n",
        ),
        (
            re.compile(
                rf"\b(?:in\s+the\s+|over\s+the\s+|during\s+the\s+)?(?:last|past)\s+({_NUMBER_RE})\s+(days?|weeks?|months?)\b",
                re.I,
            ),
            "last_n",
        ),
        (re.compile(rf"\b(?:in|during|for|by end of)\s+({_MONTH_RE})\b(?:\s+(\d{{4}}))?", re.I), "month"),
        (re.compile(r"\b(?:by|before|until|through)\s+(.{3,24})", re.I), "before"),
    ]
    for pattern, kind in rules:
        m = pattern.search(text)
        if m is None:
            continue
        span = Span(None, m.start(), m.end())
        g = m.groups()
        if kind == "rel":
            which, unit = g[0].lower(), g[1].lower()
            offset = {"next": 1, "coming": 1, "last": -1, "previous": -1}.get(which, 0)
            label = f"{'this' if offset == 0 else which} {unit}"
            if unit == "quarter":
                start, end = quarter_bounds(today, offset)
            elif unit == "month":
                start = add_months(today.replace(day=1), offset)
                end = month_end(start)
            elif unit == "week":
                start = today - dt.timedelta(days=today.weekday()) + dt.timedelta(days=7 * offset)
                end = start + dt.timedelta(days=6)
            else:
                start, end = dt.date(today.year + offset, 1, 1), dt.date(today.year + offset, 12, 31)
            return Period(start, end, label), span
        if kind == "past":
            unit = g[0].lower()
            start = _shift(today, 1, unit, -1)
            return Period(start, today, f"in the past {unit}"), span
        if kind == "day":
            word = g[0].lower()
            day = today + dt.timedelta(days={"yesterday": -1, "tomorrow": 1}.get(word, 0))
            return Period(day, day, word), span
        if kind == "q":
            year = today.year
            if g[1]:
                year = int(g[1]) if len(g[1]) == 4 else 2000 + int(g[1])
            start = dt.date(year, 3 * (int(g[0]) - 1) + 1, 1)
            return Period(start, month_end(add_months(start, 2)), f"Q{g[0]} {year}"), span
        if kind == "next_n":
            count_word, unit = (g[0], g[1]) if g[0] else (g[2], g[3])
            count = number_value(count_word)
            if count is None:
                continue
            end = _shift(today, count, unit, 1)
            return Period(today, end, f"in the next {count} {unit.rstrip('s')}s"), span
        if kind == "last_n":
            count = number_value(g[0])
            if count is None:
                continue
            start = _shift(today, count, g[1], -1)
            return Period(start, today, f"in the last {count} {g[1].rstrip('s')}s"), span
        if kind == "month":
            return _month_period(today, MONTHS[g[0].lower()], int(g[1]) if g[1] else None), span
        if kind == "before":
            target = find_dates(g[0], today)
            if target and target[0].start == 0 and isinstance(target[0].value, dt.date):
                end = target[0].value
                return Period(None, end, f"by {end.isoformat()}"), Span(
                    None, m.start(), m.start(1) + target[0].end
                )
    return None


# --- amounts, stages, activity types -----------------------------------------------------

_CURRENCY_CODES = {"$": "USD", "usd": "USD", "dollars": "USD", "€": "EUR", "eur": "EUR", "euros": "EUR"}
_CURRENCY_CODES |= {"£": "GBP", "gbp": "GBP", "pounds": "GBP", "cad": "CAD", "aud": "AUD", "chf": "CHF"}
_AMOUNT_RE = re.compile(
    r"(?P<pre>\$|€|£|\b(?:usd|eur|gbp|cad|aud|chf)\b)?\s?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?:\s?(?P<suf>k|mm|m|bn|b|thousand|million|billion)\b)?"
    r"(?:\s?(?P<post>usd|eur|gbp|cad|aud|chf|dollars|euros|pounds)\b)?",
    re.I,
)
_MULTIPLIERS = {
    "k": 1e3,
    "thousand": 1e3,
    "m": 1e6,
    "mm": 1e6,
    "million": 1e6,
    "b": 1e9,
    "bn": 1e9,
    "billion": 1e9,
}


def find_amount(text: str, *, plain_numbers: bool = False) -> Span | None:
    """A money amount: ``$120k``, ``120,000 USD``, ``1.2m``, ``EUR 50k``.

    A bare number counts only when ``plain_numbers`` (the text talks about an amount);
    then the last bare number wins, since "set Renewal 2027's amount to 150000" names the
    value last.
    """
    marked: list[Span] = []
    plain: list[Span] = []
    for m in _AMOUNT_RE.finditer(text):
        num = float(m.group("num").replace(",", ""))
        suffix = (m.group("suf") or "").lower()
        value = num * _MULTIPLIERS.get(suffix, 1.0)
        currency_word = (m.group("pre") or m.group("post") or "").lower()
        currency = _CURRENCY_CODES.get(currency_word)
        span = Span(Amount(round(value, 2), currency), m.start(), m.end())
        if currency or suffix or "," in m.group("num"):
            marked.append(span)
        else:
            plain.append(span)
    if marked:
        return marked[0]
    if plain_numbers and plain:
        return plain[-1]
    return None


_STAGE_WORDS: tuple[tuple[str, str], ...] = (
    (r"closed[\s-]*won", "Closed Won"),
    (r"closed[\s-]*lost", "Closed Lost"),
    (r"negotiat(?:ion|ing)", "Negotiation"),
    (r"proposal", "Proposal"),
    (r"qualif(?:ication|ied|ying)", "Qualification"),
    (r"prospect(?:ing)?", "Prospecting"),
)


def find_stage(text: str, *, mark_verb: bool = False) -> Span | None:
    """A pipeline stage named as a target or filter ("to negotiation", "in Proposal", "closed won").

    "Closed won/lost" are unambiguous anywhere; other stage words need a lead-in
    (to/into/as/in/at/stage), because "send the proposal" is not a stage. With
    ``mark_verb`` ("mark … won") a bare won/lost counts too.
    """
    for word, stage in _STAGE_WORDS:
        if stage.startswith("Closed"):
            m = re.search(rf"\b{word}\b", text, re.I)
        else:
            m = re.search(
                rf"\b(?:to|into|as|in|at|stage(?:\s+(?:to|is|of|=))?|back\s+to)\s+(?:the\s+)?({word})(?:\s+stage)?\b",
                text,
                re.I,
            )
        if m is not None:
            return Span(stage, m.start(), m.end())
    if mark_verb:
        m = re.search(r"\b(?:as\s+)?(won|lost)\b", text, re.I)
        if m is not None:
            return Span("Closed Won" if m.group(1).lower() == "won" else "Closed Lost", m.start(), m.end())
    return None


_ACTIVITY_TYPES: tuple[tuple[str, str], ...] = (
    (r"meeting|met\b|meet\b|demo|lunch|workshop|visit|onsite|qbr", "meeting"),
    (r"call|called|phone|spoke|talked|rang", "call"),
    (r"e-?mail(?:ed)?", "email"),
    (r"task|to-?do|reminder|note", "task"),
)


def find_activity_type(text: str) -> str | None:
    """The kind of activity named first in the text (call, meeting, email, task)."""
    best: tuple[int, str] | None = None
    for pattern, kind in _ACTIVITY_TYPES:
        m = re.search(rf"\b(?:{pattern})", text, re.I)
        if m is not None and (best is None or m.start() < best[0]):
            best = (m.start(), kind)
    return best[1] if best else None


# --- names ---------------------------------------------------------------------------------

# Words that are never (part of) an account name: function words, the copilot's command
# vocabulary and CRM field words. Anything else may be a name.
_STOPWORD_LINES = (
    "a an the this that these those it its it's them they their there here me my mine i i'm i've we we're",
    "our ours us you your yours he she his her him is are was were be been being am do does did done doing",
    "have has had having can could would should will shall may might must please pls kindly just also",
    "and or but so then than to into onto of on in at by for from with without about regarding re via per",
    "as up down out over under again all any some each every no not only own same too very more most less",
    "what what's whats which who who's whom whose when where why how how's hows",
    "hi hello hey thanks thank ok okay yes yeah sure",
    "tell show give get got find look lookup list display see view pull fetch check let know need want like",
    "summarise summarize summarised summarized summary summaries overview status update updates updated",
    "brief briefing recap catch going on happening happened new latest recent recently last next current",
    "log logged record recorded add added create created note notes make put set change changed move moved",
    "push pushed slip slipped bump bumped mark marked close closed closing closes won lost edit modify adjust",
    "increase decrease raise lower reduce draft drafted write compose prepare send reply followup follow",
    "follow-up email e-mail emails mail message call called calls meeting meetings met meet task tasks todo",
    "demo lunch visit spoke talked discussed discuss discussing",
    "account accounts company companies customer customers client clients org organisation organization",
    "deal deals opportunity opportunities opp opps pipeline forecast quota",
    "renewal renewals expansion upsell add-on addon pilot rollout upgrade",
    "contact contacts people person stakeholder stakeholders decision maker makers champion",
    "activity activities interaction interactions history touchpoint touchpoints",
    "stage stages amount value worth size step steps date dates open opened owner owners",
    "prospecting qualification proposal negotiation",
    "today tomorrow yesterday tonight morning afternoon evening week weeks month months quarter quarters",
    "year years day days now soon ago end",
    "preferences preference settings tone signature cadence",
    "everything anything something info information details detail things stuff",
    "copilot bot crm team",
    # Question words that are never part of a name ("how many", "is it worth", "when did we talk").
    "many much number count total totals worth big large largest biggest smallest value valued expected expect",
    "sign signed signing signs land lands landing due track left pending outstanding else still currently",
    "talk talking speak speaking hear heard reach reached contacted touch touched whom",
    "one two three four five six seven eight nine ten eleven twelve couple few several",
    "later earlier sooner back forward ahead delay delayed postpone postponed extend extended shift",
    "who's whos what're where's there's isn't aren't don't doesn't didn't haven't after before until since during",
    "possible able way chance quick quickly real really actually exactly roughly approximately overall",
)
STOPWORDS: frozenset[str] = frozenset(word for line in _STOPWORD_LINES for word in line.split())
_PREPOSITIONS = frozenset({"about", "with", "on", "for", "at", "of", "from", "regarding", "re", "to", "into"})
_LEAD_VERBS = frozenset(
    {
        "summarise",
        "summarize",
        "summary",
        "overview",
        "status",
        "update",
        "brief",
        "recap",
        "tell",
        "show",
        "find",
        "check",
        "lookup",
    }
)
_TOKEN_RE = re.compile(r"[A-Za-z0-9&][A-Za-z0-9&'’.\-]*")
_BOUNDARY_RE = re.compile(r"\s[-–—]\s|[—–:;,!?()\[\]\"“”]|\.(?:\s|$)|\n")


@dataclass(frozen=True)
class NameRun:
    """A run of consecutive non-vocabulary words: a possible account or person name."""

    text: str
    start: int
    capitalised: bool
    after: str  # the nearest vocabulary word before the run ("" at a segment start)
    firm: bool = False
    """Typed as a name: capitalised in a message not typed in capitals, quoted, or with a digit
    (an id, "Renewal 2027"). Any other run is a word until a visible record's name matches it."""


def _clean_token(token: str) -> str:
    return token.strip(".'’-")


def _run_of(words: list[tuple[str, int, bool]], after: str, text: str) -> NameRun:
    """One name run from its ``(word, offset, is_sentence_start)`` tokens in ``text``."""
    texts = [w for w, _, _ in words]
    if re.search(r"['’]s$", texts[-1], re.I):
        texts[-1] = texts[-1][:-2]  # possessive at the end of a name: "Vandelay's renewal"
    # A capital letter says "name" only where the sentence does not force one.
    caps = any(w[:1].isupper() and not first for w, _, first in words)
    # In a message typed in capitals a capital says nothing; a quote or a digit still does.
    shouted = not any(ch.islower() for ch in text)
    quoted = text[: words[0][1]].rstrip()[-1:] in ('"', "“", "'", "‘")
    firm = (caps and not shouted) or quoted or any(ch.isdigit() for w in texts for ch in w)
    return NameRun(" ".join(t for t in texts if t), words[0][1], caps, after, firm)


def name_runs(text: str) -> list[NameRun]:
    """Runs of words that are not vocabulary, split at punctuation: the name candidates."""
    runs: list[NameRun] = []
    position = 0
    first_word_seen = False
    for segment in _BOUNDARY_RE.split(text):
        offset = text.find(segment, position)
        position = offset + len(segment)
        current: list[tuple[str, int, bool]] = []
        previous_vocab = ""
        for m in _TOKEN_RE.finditer(segment):
            raw = _clean_token(m.group(0))
            if not raw:
                continue
            lower = raw.lower()
            bare = re.sub(r"['’]s$", "", lower)
            is_vocab = lower in STOPWORDS or bare in STOPWORDS or raw.replace(".", "").isdigit()
            sentence_start = not first_word_seen
            first_word_seen = True
            if not is_vocab:
                current.append((raw, offset + m.start(), sentence_start))
                if bare != lower:
                    # A possessive ends a name: "Denver's weather" is Denver's, not its name.
                    runs.append(_run_of(current, previous_vocab, text))
                    current = []
                continue
            if current:
                runs.append(_run_of(current, previous_vocab, text))
                current = []
            if lower not in {"the", "a", "an", "my", "our", "their", "this", "that"}:
                previous_vocab = bare
        if current:
            runs.append(_run_of(current, previous_vocab, text))
    return runs


def account_candidates(text: str, *, masked: list[Span] | None = None) -> list[str]:
    """Possible account names in ``text``, best first (see :func:`name_candidates`)."""
    return [name for name, _ in name_candidates(text, masked=masked)]


def name_candidates(text: str, *, masked: list[Span] | None = None) -> list[tuple[str, bool]]:
    """Possible account names in ``text``, best first, each with whether it is tentative
    (not typed as a name, :attr:`NameRun.firm`: a word unless a visible record matches it).

    Dates, amounts and other already-understood values are masked first. A run with a
    capitalised word (not the sentence's first) ranks first, then a run right after a
    preposition or summary verb ("about Vandelay", "summarise vandelay"); a run after "to" ranks
    last because that is usually a person ("to Dana at Vandelay") or a new value.
    """
    cleaned = mask(text, masked or [])
    runs = name_runs(cleaned)

    def rank(run: NameRun) -> tuple[int, int]:
        if run.after == "to":
            return (3, run.start)
        if run.capitalised:
            return (0, run.start)
        if run.after in _PREPOSITIONS or run.after in _LEAD_VERBS:
            return (1, run.start)
        return (2, run.start)

    ordered: list[tuple[str, bool]] = []
    for run in sorted(runs, key=rank):
        words = run.text.split()[:5]
        # "Brightwater cold chain": the capitalised words are the name, the rest the deal's.
        proper = list(itertools.takewhile(lambda w: w[:1].isupper(), words))
        lead = " ".join(proper) if run.capitalised and 0 < len(proper) < len(words) else ""
        for candidate in (lead, " ".join(words), words[0] if len(words) > 1 else ""):
            if candidate and len(candidate) > 1 and candidate.lower() not in (c.lower() for c, _ in ordered):
                ordered.append((candidate, not run.firm))
    return ordered


def content_words(text: str) -> set[str]:
    """Lower-case words of ``text`` minus stopwords (keeps deal words like "renewal")."""
    deal_words = {"renewal", "expansion", "upsell", "add-on", "addon", "pilot", "rollout", "upgrade"}
    words = {w.lower().strip(".'’-") for w in _TOKEN_RE.findall(text)}
    return {w for w in words if w and (w not in STOPWORDS or w in deal_words) and not w.isdigit()} | {
        w for w in words if w.isdigit() and len(w) == 4
    }
