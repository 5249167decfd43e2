"""What the rep asked for: intents and their entities, parsed from the human message only.

Tool results never choose what the offline model does: only the rep's own words do (tool
output is data, never instructions). Results only tell which words the rep typed are
record ids (:mod:`records`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from offline_model.capture_parse import CaptureSpec, parse_capture
from offline_model.questions import (
    DEAL_FIELDS,
    Focus,
    Rank,
    asks_for_a_title,
    correct_typos,
    find_asked_field,
    find_focus,
    find_rank,
    focus_patterns,
    focus_spans,
    is_question,
    title_spans,
)
from offline_model.records import RecordIndex, TypedId, id_candidates, typed_ids
from offline_model.roles import Kind
from offline_model.text import (
    Amount,
    NameRun,
    Period,
    Shift,
    Span,
    find_activity_type,
    find_amount,
    find_dates,
    find_period,
    find_shift,
    find_stage,
    mask,
    name_candidates,
    name_runs,
    number_value,
)

Intent = Literal[
    "preferences_show",
    "preferences_update",
    "log",
    "update",
    "draft",
    "undo",
    "overview",
    "opportunities",
    "pipeline",
    "activities",
    "contacts",
    "help",
]
"""What the rep wants; several read intents may share one question (composed in this order)."""
WriteIntent = Literal["preferences_update", "log", "update", "draft", "undo"]
WRITE_INTENTS: tuple[WriteIntent, ...] = ("preferences_update", "log", "update", "draft", "undo")

_OPPORTUNITY_CUES = re.compile(
    r"\b(deals?|opportunit(?:y|ies)|opps?|renewals?|expansions?|upsell|add-?on|pilot|rollout|upgrade|new business)\b",
    re.I,
)
_DETAIL_SEPARATOR = re.compile(
    r"\s[—–-]\s|—|–|:\s|;\s|,\s|\s(?:about|regarding|re:|to discuss|discussed|discussing|talked about|where we)\s",
    re.I,
)


@dataclass(frozen=True)
class LogSpec:
    """A requested activity log."""

    type: str
    details: str
    occurred_on: dt.date | None
    mentions_opportunity: bool


@dataclass(frozen=True)
class UpdateSpec:
    """The opportunity fields the rep asked to change (only those).

    ``shift`` moves the close date relative to the deal's own ("slip it two weeks"): the
    date is computed once the deal is read. ``unclear`` is what the rep said about a date
    that could not be read as one: the model asks instead of guessing or doing nothing.
    """

    changes: dict[str, object]
    shift: Shift | None = None
    unclear: str | None = None


@dataclass(frozen=True)
class DraftSpec:
    """A requested follow-up email draft."""

    contact_name: str | None
    topic: str | None
    points: tuple[str, ...] = ()
    """What the rep asked the email to say, in the rep's words addressed to the contact
    ("thank her for confirming budget" → "thank you for confirming budget")."""


@dataclass(frozen=True)
class PrefsSpec:
    """Requested preference changes (the arguments of the preferences write)."""

    args: dict[str, object]
    problem: str | None = None


@dataclass(frozen=True)
class UndoSpec:
    """A requested undo: of one numbered change, or of the newest change matching words."""

    audit_id: int | None
    words: tuple[str, ...]
    """The rep's words that may name the change ("zephyr", "stage"); empty = the last one."""


# "undo" anywhere ("I'd like to undo that"); the other verbs only leading the request.
_UNDO = re.compile(
    r"\bundo\b|^\s*(?:please\s+|can you\s+|could you\s+|pls\s+)*(?:revert|reverse|roll\s*back)\b", re.I
)
_UNDO_NUMBER = re.compile(
    r"\b(?:audit\s+record|record|change|audit)\s*(?:no\.?|number|#)?\s*#?(\d{1,12})\b", re.I
)
_UNDO_FILLER = frozenset(
    [
        "undo",
        "would",
        "like",
        "want",
        "i'd",
        "revert",
        "reverse",
        "roll",
        "rollback",
        "back",
        "please",
        "can",
        "could",
        "you",
        "pls",
        "my",
        "the",
        "a",
        "an",
        "that",
        "this",
        "last",
        "latest",
        "recent",
        "change",
        "changes",
        "update",
        "edit",
        "write",
        "i",
        "made",
        "just",
        "me",
        "to",
        "of",
        "on",
        "for",
        "it",
    ]
)


def parse_undo(text: str) -> UndoSpec | None:
    """An undo request ("undo my last change", "undo the Zephyr stage change"), else None."""
    if not _UNDO.search(text):
        return None
    number = _UNDO_NUMBER.search(text)
    if number is not None:
        return UndoSpec(int(number.group(1)), ())
    found = [w for w in re.findall(r"[a-z0-9][a-z0-9'-]*", text.lower()) if w not in _UNDO_FILLER]
    return UndoSpec(None, tuple(found))


@dataclass
class Request:
    """One human message, understood."""

    text: str
    intents: list[Intent]
    account_queries: list[str] = field(default_factory=list)
    tentative: set[str] = field(default_factory=set)
    """The account queries not typed as names: only a visible record whose name matches makes one a name."""
    records: list[TypedId] = field(default_factory=list)
    """Record ids the rep wrote that tool results returned (so their kind is known)."""
    unverified: list[str] = field(default_factory=list)
    """Words that may be record ids no tool result has returned yet: read them to find out."""
    period: Period | None = None
    stage: str | None = None
    owner: str = "me"
    team: bool = False
    refers_back: bool = False
    log: LogSpec | None = None
    capture: CaptureSpec | None = None
    """A dictated activity ("… log it") or a reminder: :mod:`offline_model.capture` plans it."""
    update: UpdateSpec | None = None
    draft: DraftSpec | None = None
    prefs: PrefsSpec | None = None
    undo: UndoSpec | None = None
    match_text: str = ""  # the text with dates, amounts and new values blanked: for matching deal names
    focus: list[Focus] = field(default_factory=list)
    """What a read question asks about its records: a count, one field, the latest activity."""
    title_words: list[str] = field(default_factory=list)
    """Job-title words of a contacts question ("CFO", "head of procurement")."""
    follow_up: bool = False
    """Continues the previous answer ("and its next step?", "what about the amount?")."""
    activity_type: str | None = None
    """The kind of activity a read asks about ("any meetings with …", "last call")."""
    guidance: bool = False
    """Asks how to sell ("what should I do next", "how do I handle …"): playbooks apply."""
    about_documents: bool = False
    """Names what only documents hold (a playbook, an objection, pricing guidance)."""
    rank: Rank | None = None
    """Asks for the largest (or smallest) deal by amount ("my biggest deal")."""
    asked_field: str | None = None
    """A field asked for by a word of the records' own ("commission"): their keys say if it is one."""
    unread: bool = False
    """Nothing in the message could be read as a request, not even one for help."""
    rest: str = ""
    """A read question with every span its parse placed blanked out."""
    open_runs: list[NameRun] = field(default_factory=list)
    """A read question's runs of words its vocabulary did not place (no intent cue, field,
    date, stage, title or id): each must name a record, or the question was not read
    completely (:mod:`offline_model.limits`)."""

    @property
    def deal_fields(self) -> list[Focus]:
        """The fields of a deal the question asks for (amount, next step, close date, stage)."""
        return [f for f in self.focus if f in DEAL_FIELDS]

    @property
    def is_write(self) -> bool:
        """Whether the request asks for any change outside the conversation."""
        return any(i in WRITE_INTENTS for i in self.intents)

    def ids_of(self, kind: Kind) -> list[str]:
        """The ids of this kind the rep wrote."""
        return [r.id for r in self.records if r.kind == kind]


def _firm(runs: list[NameRun]) -> bool:
    """Whether any run was typed as a name (capitalised, quoted, with a digit)."""
    return any(run.firm for run in runs)


def _has(pattern: str, text: str) -> bool:
    return re.search(pattern, text, re.I) is not None


def _sentence_case(text: str) -> str:
    text = text.strip(" .,;:-—–")
    return text[:1].upper() + text[1:] if text else text


# --- preferences ---------------------------------------------------------------------------


def parse_preferences(text: str) -> tuple[Intent, PrefsSpec | None] | None:
    """``("preferences_show", None)``, ``("preferences_update", spec)`` or ``None`` if not about preferences."""
    lower = text.lower()
    args: dict[str, object] = {}
    if _has(
        r"\b(reset|restore|clear)\b.*\b(preferences?|settings|defaults?)\b|\bback to (the )?defaults?\b",
        lower,
    ):
        return "preferences_update", PrefsSpec({"reset": True})
    tone = re.search(r"\b(friendly|formal|concise)\b", lower)
    if tone and _has(r"\b(tone|style|emails?|e-mails?|drafts?|write|writing|sound|more)\b", lower):
        args["email_tone"] = tone.group(1)
    signature = re.search(
        r"\bsignature\b\s*(?:to|as|is|=|should be|of)?\s*[:\-]?\s*(.+)$", text, re.I | re.DOTALL
    )
    if signature and signature.group(1).strip(" \"'“”"):
        args["signature"] = signature.group(1).strip().strip("\"'“”").strip()
    problem = None
    cadence = re.search(
        rf"\b(?:follow[\s-]?ups?|follow\s+up|cadence|remind\s+me|check\s+in)\b.{{0,40}}?"
        rf"(?:every\s+(?:(\d{{1,3}}|{'|'.join(('two', 'three', 'four', 'five', 'six', 'seven', 'ten'))})\s+)?(days?|weeks?)"
        rf"|(?:to|of|=)\s+(\d{{1,3}})\s*(days?|weeks?))",
        lower,
    )
    if cadence:
        count_word = cadence.group(1) or cadence.group(3) or "1"
        unit = cadence.group(2) or cadence.group(4) or "days"
        count = number_value(count_word) or 1
        days = count * (7 if unit.startswith("week") else 1)
        if 1 <= days <= 90:
            args["followup_cadence_days"] = days
        else:
            problem = "The follow-up cadence must be between 1 and 90 days."
    if args or problem:
        return "preferences_update", PrefsSpec(args, problem)
    if _has(r"\bpreferences?\b|\bmy (settings|signature|tone)\b", lower):
        return "preferences_show", None
    return None


# --- writes --------------------------------------------------------------------------------


def _is_log(lower: str) -> bool:
    return _has(
        r"^\s*(?:please\s+|can you\s+|could you\s+|pls\s+)*(?:log|record|note down|jot down)\b"
        r"|\b(?:log|record)\s+(?:a|an|the|my|this|that|our)?\s*(?:call|meeting|email|e-mail|task|note|activity|demo|visit)"
        r"|\b(?:add|create)\s+(?:a|an|new)?\s*(?:task|note|activity|to-?do|reminder|call log|meeting note|call|meeting)\b",
        lower,
    )


def parse_log(text: str, today: dt.date) -> LogSpec:
    """The activity to log: type, the details after the header, and when it happened."""
    kind = find_activity_type(text) or "task"
    m = _DETAIL_SEPARATOR.search(text)
    header, details = (text[: m.start()], text[m.end() :]) if m else (text, "")
    if m and m.group(0).strip().lower() in {"discussed", "discussing", "talked about"}:
        details = m.group(0).strip() + " " + details
    # When it happened is said in the header ("a meeting with Vandelay yesterday"); dates in
    # the details are content ("send the contract by Friday") and stay in the notes.
    past_dates = find_dates(header, today, past=True)
    occurred = past_dates[0].value if past_dates and isinstance(past_dates[0].value, dt.date) else None
    details = re.sub(r"\s{2,}", " ", details).strip(" ,;:.-—–")
    return LogSpec(
        type=kind,
        details=_sentence_case(details),
        occurred_on=occurred,
        mentions_opportunity=bool(_OPPORTUNITY_CUES.search(header)),
    )


_CHANGE_VERBS = (
    r"\b(push|pushed|move|moved|set|change|changed|update|updated|mark|marked|slip|slipped|bump|bumped|pull|pulled"
    r"|make|put|adjust|increase|decrease|raise|lower|reduce|drop|advance|close|edit|modify)\b"
)


def _next_step(text: str) -> Span | None:
    """ "next step to X", "next step: X", "next step on <deal> to X" → X (until an "and <verb>")."""
    m = re.search(
        r"\bnext[\s-]+steps?\b(?:\s+(?:on|for|of)\s+.+?\s+(?:to|as|=)\s+|\s*(?:to|is|as|=|:|->)?\s*)(?P<value>.+)$",
        text,
        re.I | re.DOTALL,
    )
    if m is None:
        return None
    value = m.group("value")
    if re.match(r"(?:on|for|of)\b", value, re.I):
        return None  # "next step on the renewal" with no new value
    stop = re.search(rf"\s+and\s+(?:then\s+)?{_CHANGE_VERBS}", value, re.I)
    if stop:
        value = value[: stop.start()]
    value = value.strip().strip("\"'“”").strip(" .")
    if not value:
        return None
    # Only the value is "used up": the words before it may still name the deal ("on the Vandelay renewal").
    return Span(_sentence_case(value), m.start("value"), m.start("value") + len(value))


_DATE_VERBS = (
    r"\b(push(?:ed)?|slip(?:ped)?|postpone|delay|reschedule|bump(?:ed)?|move|moved|change|set|update|shift|extend"
    r"|pull|bring|advance)\b"
)
_DATE_CHANGE = re.compile(
    r"\b(?:clos(?:e|ing)[\s-]+date|push(?:ed)?|slip(?:ped)?|postpone|delay|reschedule|bump(?:ed)?)\b", re.I
)


def parse_update(
    text: str, today: dt.date, *, typed: str | None = None
) -> tuple[UpdateSpec, list[Span]] | None:
    """The requested opportunity changes, or ``None`` if the text asks for no change.

    ``typed`` is the message as the rep typed it (``text`` may have typos corrected): a
    new next step is their own words, taken from it.
    """
    lower = text.lower()
    # A change needs a change verb ("push", "set", "mark"...) or an explicit setter
    # ("next step: …"); "what's the next step on the renewal?" is a question, not a change,
    # and the "close" of "close date" is a field, not a verb.
    verbs = re.sub(r"\bclos(?:e|ing)[\s-]+dates?\b", " ", lower)
    if not _has(
        _CHANGE_VERBS + r"|\b(slide|delay|postpone|extend|shift|reschedule|bring|advance)\b", verbs
    ) and not _has(r"\b(close date|next steps?)\s*(:|=|->)", lower):
        return None
    if is_question(lower) and not _has(r"\b(can|could|would|will)\s+you\b", lower):
        return None
    changes: dict[str, object] = {}
    used: list[Span] = []
    step = _next_step(text)
    rest = text
    if step is not None:
        own = _next_step(typed) if typed is not None else None
        value = own.value if own is not None else step.value
        used.append(step)
        step = Span(value, step.start, step.end)
        rest = text[: step.start] + " " * (step.end - step.start) + text[step.end :]
    stage = find_stage(rest, mark_verb=_has(r"\b(mark(ed)?|close[ds]?|closing)\b", lower))
    if stage is not None:
        changes["stage"] = stage.value
        used.append(stage)
    shift = find_shift(rest)
    if shift is not None:
        used.append(shift)
        rest = mask(rest, [shift])
    dates = find_dates(rest, today)
    if dates:
        value = dates[0].value
        assert isinstance(value, dt.date)
        changes["close_date"] = value.isoformat()
        used.extend(dates)
    amount_rest = rest
    for span in dates:
        amount_rest = amount_rest[: span.start] + " " * (span.end - span.start) + amount_rest[span.end :]
    amount = find_amount(amount_rest, plain_numbers=_has(r"\b(amount|value|worth|size|price)\b", lower))
    if amount is not None:
        assert isinstance(amount.value, Amount)
        changes["amount"] = amount.value.value
        used.append(amount)
    if step is not None:
        changes["next_step"] = step.value
    moved = shift.value if shift is not None and isinstance(shift.value, Shift) and not dates else None
    if not changes and moved is None:
        said = _DATE_CHANGE.search(text)
        if said is None or not _has(_DATE_VERBS, verbs + " " + lower[said.start() : said.end()]):
            return None
        # A date change without a date we can read: ask, never guess and never do nothing.
        return UpdateSpec({}, unclear=text[said.start() :].strip(" ?.!")), used
    return UpdateSpec(changes, shift=moved), used


def _is_draft(lower: str) -> bool:
    return _has(
        r"\b(draft|write|compose|prepare|send|create)\b.{0,60}\b(follow[\s-]?up|e-?mail|note|message|reply|thank[\s-]?you)\b"
        r"|\bfollow[\s-]?up\s+e-?mail\b",
        lower,
    )


# Where the rep starts saying what the email should say: after a colon, or "saying …",
# "tell her …", "let him know …", "mention …".
_POINTS_START = re.compile(
    r":\s*|\b(?:saying|to say|say|tell(?:ing)? (?:her|him|them)|let(?:ting)? (?:her|him|them) know"
    r"|mention(?:ing)?|remind(?:ing)? (?:her|him|them))\b\s*(?:that\s+)?"
    r"|\b(?=thank(?:ing)?\s+(?:her|him|them)\b)",
    re.I,
)
_POINT_SPLIT = re.compile(
    r"\s*(?:;|,\s*(?:and\s+)?|\.\s+|\band also\b|\band then\b|\band\s+(?=(?:that|thank|ask|say|tell|let|mention|remind|confirm|propose|suggest|offer|invite|check)\b))\s*",
    re.I,
)
# The addressee in the rep's words, as the email says it to them.
_SECOND_PERSON = (
    (re.compile(r"\b(?:she|he|they)\b(\s+(?:is|was))\b", re.I), r"you\1"),
    (re.compile(r"\b(?:she's|he's|they're)\b", re.I), "you're"),
    (re.compile(r"\b(?:she|he|they)\b", re.I), "you"),
    (
        re.compile(
            r"\b(?:her|him|them)\b(?=\s*(?:$|[.,;!?]|\s+(?:for|about|to|that|know|if|whether|when)\b))", re.I
        ),
        "you",
    ),
    (re.compile(r"\b(?:her|his|their)\b", re.I), "your"),
)
_SAY = re.compile(r"^(?:say|tell (?:you)|mention|let you know|remind you)\s+(?:that\s+)?", re.I)
_ASK = re.compile(r"^ask(?:\s+(?:her|him|them|you))?\s+(?:about\s+)?(.+)$", re.I)


def _point(raw: str) -> str:
    """One thing the email says, addressed to the contact, as a sentence."""
    text = raw.strip(" .!?")
    for pattern, replacement in _SECOND_PERSON:
        text = pattern.sub(replacement, text)
    asked = _ASK.match(text)
    if asked is not None:
        return f"Could you tell me about {asked.group(1)}?"
    text = _SAY.sub("", text)
    text = re.sub(r"^thank(?:ing)?\s+you\b", "Thank you", text, flags=re.I)
    text = re.sub(r"^that\s+", "", text, flags=re.I)
    return text[:1].upper() + text[1:] + "."


def draft_points(text: str) -> tuple[tuple[str, ...], str]:
    """The points the rep asked a draft to make (each a sentence to the contact), and the
    rest of the message before them (where the addressee and topic are named)."""
    start = _POINTS_START.search(text)
    if start is None:
        return (), text
    said = text[start.end() :].strip()
    points = tuple(_point(p) for p in _POINT_SPLIT.split(said) if len(p.strip(" .!?")) > 2)
    return points, text[: start.start()]


def parse_draft(text: str) -> DraftSpec:
    """The addressee ("to Dana at Vandelay"), topic ("about the pricing discussion") and the
    points the rep asked the email to make ("…: thank her for confirming budget, say the
    proposal comes by the 15th") of a draft."""
    points, text = draft_points(text)
    contact = None
    m = re.search(
        # "to Dana at Vandelay", and the addressee right after the verb: "write Dana Lee from Vandelay …"
        r"\b(?:to|with|for|email|e-mail|(?i:write|draft|message|ping|mail))\s+(?!the\b|my\b|our\b|their\b|a\b|an\b)"
        r"([A-Za-z][\w'’-]*(?:\s+[A-Z][\w'’-]*)?)\s+(?:at|from|@|of)\s+",
        text,
    )
    if m is not None:
        contact = m.group(1)
    topic = None
    t = re.search(r"\b(?:about|regarding|re:?|on|covering)\s+(.+)$", text, re.I)
    if t is not None:
        topic = re.sub(r"^(?:the|our|my|your|their)\s+", "", t.group(1).strip(), flags=re.I).strip(" .,;!?")
        if not topic or topic.lower().startswith(("behalf", "it")):
            topic = None
    return DraftSpec(contact_name=contact, topic=topic, points=points)


# --- reads ---------------------------------------------------------------------------------

_OVERVIEW = (
    r"\b(summari[sz]e|summary|overview|tell me about|going on|happening|status|update on|brief me|catch me up"
    r"|how is|how's|hows|how are|what about|info on|information on|details on|details about|look up|lookup"
    r"|show me|snapshot|rundown|background)\b"
)
_PIPELINE = r"\b(pipeline|forecast|quota|commit|weighted)\b"
_GUIDANCE = (
    r"\b(what should (i|we) do|what do (i|we) do (next|now)|what to do next|how (do|should|can) (i|we)"
    r"|best practices?|advice|advise|recommend(ed|ation)?s?|tips?)\b"
)
_DOCUMENT_TOPICS = (
    r"\b(playbooks?|objections?|product sheets?|pricing guid\w*|discount (authority|policy|guid\w*)"
    r"|sales guid\w*|field guide|battle ?cards?)\b"
)
_OPPS = r"\b(deals?|opportunit(?:y|ies)|opps?|closing|renewals?)\b"
_ACTIVITY = (
    r"\b(activit(?:y|ies)|last discuss|discussed|interactions?|touch ?points?|history|last (?:call|meeting|spoke|talked|contact)"
    r"|recent(?:ly)?|what happened|what did (?:we|i)|timeline|calls|meetings)\b"
)
_CONTACTS = (
    r"\b(contacts?|who (?:are|is|do|should|can|to)|who's|whos|whom|people|stakeholders?|decision[\s-]?makers?"
    r"|champions?|buyers?|who\s+(?:handles|runs|owns|leads|heads|signs|approves|makes|works))\b"
)
# Pronouns that point at the account of the previous answer ("who are their contacts?").
_REFERS_BACK = (
    r"\b(them|they|their|that account|this account|that company|this company|that customer|same account)\b"
    r"|\b(?:at|with|from|for|on|about)\s+(?:it|there)\b"
    r"|\b(its|that deal|this deal|that one|this one|that opportunity|this opportunity|the same deal)\b"
    r"|\b(?:is|was|does|did|has|push|move|slip|pull|set|mark|change|update|bump)\s+it\b"
)
_TEAM = r"\b(team|team's|my reps|everyone|all reps|territory)\b"
_FOLLOW_UP = (
    r"^\s*(?:and|also|plus|ok(?:ay)?|so|then)\b|^\s*(?:what|how)\s+about\b|^\s*(?:and\s+)?(?:its|their)\b"
)


_CUES: tuple[str, ...] = (
    _OVERVIEW,
    _PIPELINE,
    _GUIDANCE,
    _DOCUMENT_TOPICS,
    _OPPS,
    _ACTIVITY,
    _CONTACTS,
    _REFERS_BACK,
    _FOLLOW_UP,
    _TEAM,
    _OPPORTUNITY_CUES.pattern,
)


CUE_WORDS: frozenset[str] = frozenset(
    word
    for cue in (*_CUES, *focus_patterns())
    for word in re.findall(r"[a-z]{4,}", re.sub(r"\\[a-z]", " ", cue))
)
"""The words the cue patterns spell out ("advice", "stakeholders"): vocabulary a typo may miss."""


def change_words(text: str) -> list[str]:
    """The words of ``text`` that tell of a change made ("changed", "moved", "slipped"): in a
    read question whose parse did not place them, they change what it asks. Only their past
    forms: the present ones also look things up ("pull up"), and "closed" is a stage."""
    found = [m.group(0) for pattern in (_CHANGE_VERBS, _DATE_VERBS) for m in re.finditer(pattern, text, re.I)]
    return [w for w in found if w.lower().endswith("ed") and not w.lower().startswith("clos")]


def cue_spans(text: str) -> list[Span]:
    """Where the read intents' cue patterns and the focus rules match ``text``: words the
    parse placed, though no entity was taken from them."""
    lower = text.lower()
    spans = [Span(m.group(0), m.start(), m.end()) for cue in _CUES for m in re.finditer(cue, lower, re.I)]
    return spans + focus_spans(lower)


def parse_request(
    text: str,
    today: dt.date,
    records: RecordIndex | None = None,
    *,
    ruled_out: Iterable[str] = (),
    check_ids: bool = True,
    words: Iterable[str] = (),
) -> Request:
    """Understand one human message: its intents and the entities they need.

    ``records`` are the ids earlier tool results returned (a word equal to one is that
    record). With ``check_ids`` (a tool can read a record by id) other words that may be
    ids are set aside as ``unverified``, except those in ``ruled_out`` (already read as
    ids without that record coming back: they are words). ``words`` (lower case) were
    searched as account names and match no visible account: a tentative candidate among
    them is a word, not a name.
    """
    index = records or RecordIndex()
    excluded = tuple(ruled_out)
    not_names = {w.lower() for w in words}
    original = text
    text = correct_typos(text)
    lower = text.lower()
    typed = typed_ids(text, index)
    req = Request(text=text, intents=[], records=typed)
    req.refers_back = _has(_REFERS_BACK, lower)
    req.follow_up = _has(_FOLLOW_UP, lower)
    req.team = _has(_TEAM, lower)
    req.about_documents = _has(_DOCUMENT_TOPICS, lower)
    req.guidance = req.about_documents or _has(_GUIDANCE, lower)
    req.owner = (
        "any" if req.team or _has(r"\b(all|everyone's)\s+(deals|opportunities|opps)\b", lower) else "me"
    )

    undo = parse_undo(original)
    if undo is not None:
        req.intents.append("undo")
        req.undo = undo
        return req

    capture = parse_capture(original, today)
    if capture is not None:
        # Dictation ("… log it") and reminders: the rep's own words, uncorrected.
        req.text = original
        req.intents.append("log")
        req.capture = capture
        req.account_queries = [capture.account] if capture.account else []
        req.match_text = capture.match_text
        req.log = LogSpec(capture.type, capture.notes, capture.occurred_on, mentions_opportunity=False)
        return req

    prefs = parse_preferences(text)
    if prefs is not None and not _is_log(lower):
        req.intents.append(prefs[0])
        req.prefs = prefs[1]
        return req

    masked: list[Span] = []
    for span in find_dates(text, today):
        masked.append(span)
    period = find_period(text, today)
    if period is not None:
        masked.append(period[1])
    amount = find_amount(mask(text, masked))
    if amount is not None:
        masked.append(amount)
    masked += [t.span for t in typed]

    def candidates(part: str, spans: list[Span]) -> list[Span]:
        if not check_ids:
            return []
        found = id_candidates(mask(part, spans), index, ruled_out=excluded)
        req.unverified = [str(s.value) for s in found]
        return found

    dropped: list[str] = []

    def names(part: str, spans: list[Span]) -> list[str]:
        kept: list[str] = []
        for name, tentative in name_candidates(part, masked=spans):
            if tentative and name.lower() in not_names:
                dropped.append(name)
                continue
            kept.append(name)
            if tentative:
                req.tentative.add(name)
        return kept

    if _is_log(lower):
        # Notes are the rep's own words: parsed from what they typed, uncorrected.
        text = original
        req.text = text
        req.intents.append("log")
        # The account is named in the header, never in the details ("… next step send proposal").
        sep = _DETAIL_SEPARATOR.search(text)
        header = text[: sep.start()] if sep else text
        in_header = [s for s in masked if s.end <= len(header)]
        in_header += candidates(header, in_header)
        req.account_queries = names(header, in_header)
        if not req.account_queries:
            req.account_queries = names(text, masked + in_header)
        req.log = parse_log(text, today)
        req.match_text = mask(header, in_header)
        return req

    if _is_draft(lower):
        text = original
        req.text = text
        req.intents.append("draft")
        req.draft = parse_draft(text)
        topic_start = lower.find(req.draft.topic.lower()) if req.draft.topic else -1
        head = text[:topic_start] if topic_start > 0 else text
        in_head = [s for s in masked if s.end <= len(head)]
        in_head += candidates(head, in_head)
        found = names(head, in_head)
        contact = (req.draft.contact_name or "").lower()
        req.account_queries = [
            n for n in found if n.lower() != contact and not contact.startswith(n.lower() + " ")
        ]
        return req

    update = parse_update(text, today, typed=original)
    if update is not None:
        req.intents.append("update")
        req.update = update[0]
        spans = masked + update[1]
        spans += candidates(text, spans)
        req.account_queries = names(text, spans)
        req.match_text = mask(text, spans)
        return req

    # Reads.
    if period is not None:
        req.period = period[0]
    rank = find_rank(lower)
    if rank is not None:
        req.rank = "largest" if rank.value == "largest" else "smallest"
        masked.append(rank)
    asked = find_asked_field(lower)
    if asked is not None and not (_has(_CONTACTS, lower) or asks_for_a_title(text)):
        req.asked_field = str(asked.value)
        masked.append(asked)
    # "how much commission": the field asked for, not the amount.
    req.focus = find_focus(mask(lower, [asked]) if req.asked_field and asked else lower)
    stage = find_stage(text)
    req.stage = stage.value if stage is not None and isinstance(stage.value, str) else None
    if stage is not None:
        masked.append(stage)
    wants_contacts = _has(_CONTACTS, lower)
    if asks_for_a_title(text) or (wants_contacts and title_spans(text)):
        titles = title_spans(mask(text, masked))
        req.title_words = [str(t.value) for t in titles]
        masked += titles
        wants_contacts = wants_contacts or bool(titles)
    masked += candidates(text, masked)
    req.account_queries = names(text, masked)
    # Words the parse's own cues read ("rundown", "advice", "stakeholders") are placed too. The
    # word a value is asked by ("the weather in Denver") is no name, but not placed either: only
    # an answer about that field of the records places it (limits.honest), else it is not understood.
    req.rest = mask(text, [s for s in masked if s is not asked] + cue_spans(text))
    req.open_runs = name_runs(req.rest)
    if req.about_documents and not req.records and not req.unverified and not _firm(req.open_runs):
        # "what does our playbook say about negotiation?": the documents answer it, even when
        # it names a stage or deals in general (no record is named, so none is listed).
        req.intents.append("help")
        return req
    # A word that may be an id is read as an account first (an overview is an account's).
    has_account = bool(req.account_queries or req.ids_of("account") or req.unverified)
    wants_pipeline = _has(_PIPELINE, lower)
    wants_activity = _has(_ACTIVITY, lower) or "last_activity" in req.focus
    wants_opps = (
        _has(_OPPS, lower)
        or req.stage is not None
        or bool(req.deal_fields or req.rank or req.asked_field)
        or (req.period is not None and not has_account and not wants_activity and not wants_contacts)
    )
    if "count" in req.focus and not (wants_opps or wants_activity or wants_contacts):
        wants_opps = True
    wants_overview = _has(_OVERVIEW, lower) and not (req.deal_fields or req.title_words or req.asked_field)
    if wants_activity:
        kind = re.search(r"\b(meeting|call|e-?mail|task)s?\b", lower)
        req.activity_type = kind.group(1).replace("-", "") if kind else None
    if has_account:
        if wants_contacts:
            req.intents.append("contacts")
        if wants_activity:
            req.intents.append("activities")
        if wants_opps and not wants_overview:
            req.intents.append("opportunities")
        if wants_overview or not req.intents:
            req.intents.insert(0, "overview")
        return req
    if wants_pipeline:
        req.intents.append("pipeline")
    elif wants_opps:
        req.intents.append("opportunities")
    if wants_contacts:
        req.intents.append("contacts")  # needs an account: from the conversation, or ask
    if wants_activity:
        req.intents.append("activities")
    # "summarise zorg" when no visible account is called that: which account, not "no such account".
    if not req.intents and wants_overview and (req.refers_back or dropped):
        req.intents.append("overview")
    if not req.intents:
        req.intents.append("help")
        req.unread = not _has(
            r"\bhelp\b|\bwhat (?:can|do) you\b|\bhow do(?:es)? (?:you|this|it) work\b", lower
        )
    return req


def log_occurred_at(day: dt.date | None, today: dt.date) -> str | None:
    """``occurred_at`` for a logged activity: noon UTC of a past day, or ``None`` for today (= now)."""
    if day is None or day >= today:
        return None
    return f"{day.isoformat()}T12:00:00Z"


__all__ = [
    "WRITE_INTENTS",
    "DraftSpec",
    "Intent",
    "LogSpec",
    "PrefsSpec",
    "Request",
    "UndoSpec",
    "UpdateSpec",
    "WriteIntent",
    "log_occurred_at",
    "parse_request",
    "parse_undo",
]
