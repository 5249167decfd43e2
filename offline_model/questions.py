"""What a read question is after, beyond which records: a count, one field, a job title (pure).

"how many open deals does X have?" wants a count; "what's the next step on the X renewal?"
one field of one deal; "who is the CFO at X?" the contacts whose title fits. These are
kinds of phrasing (question words, field names and their synonyms, job-title words),
never particular questions. Also here: correcting typos of the copilot's own vocabulary
("opportunites", "contcts", "renwal"), so a misspelt word is neither missed nor taken
for part of a name.
"""

from __future__ import annotations

import re
from difflib import get_close_matches
from typing import Literal

from offline_model.text import STOPWORDS, Span

Focus = Literal["count", "amount", "next_step", "close_date", "stage", "last_activity"]
"""What one question asks about its records (besides listing them)."""
DEAL_FIELDS: tuple[Focus, ...] = ("amount", "next_step", "close_date", "stage")

_FOCUS_RULES: tuple[tuple[Focus, re.Pattern[str]], ...] = (
    (
        "count",
        re.compile(
            r"\bhow\s+many\b|\bnumber\s+of\b|\bcount\s+(?:of\s+)?(?:my|the|our)?\b|\bhow\s+much\s+activity\b"
        ),
    ),
    (
        "next_step",
        re.compile(
            r"\bnext[\s-]+steps?\b|\bwhat(?:'s|\s+is|s)?\s+(?:left|pending|outstanding)\b"
            r"|\bwhat\s+(?:do|should|must)\s+(?:we|i)\s+(?:need\s+to\s+)?do\s+next\b|\bwhat\s+comes\s+next\b"
        ),
    ),
    (
        "close_date",
        re.compile(
            r"\bclos(?:e|ing)[\s-]+dates?\b|\bexpected\s+to\s+(?:close|sign|land)\b"
            r"|\bwhen\b.{0,60}\b(?:clos(?:e|es|ing)|sign(?:s|ing)?|land(?:s|ing)?|due)\b"
        ),
    ),
    (
        "amount",
        re.compile(
            r"\bamount\b|\bworth\b|\bhow\s+(?:much|big|large)\b|\bdeal\s+size\b|\bsize\s+of\b|\bvalue\s+of\b"
            r"|\bwhat(?:'s|\s+is)\s+(?:the\s+)?value\b|\bvalued\b"
        ),
    ),
    (
        "stage",
        re.compile(
            r"\b(?:what|which)\s+stage\b|\bstage\s+(?:is|of|for)\b|\bstages?\s*\?"
            r"|\b(?:is|are)\s+\w+(?:\s+\w+){0,4}\s+in\s+(?:stage\b|which\s+stage)"
        ),
    ),
    (
        "last_activity",
        re.compile(
            r"\blast\s+(?:activity|touch(?:\s?point)?|interaction|contact(?:ed)?|call|meeting|email|e-mail"
            r"|spoke|talked|time\s+(?:we|i))\b|\bwhen\s+did\s+(?:we|i|anyone)\s+last\b"
            r"|\b(?:most\s+recent|latest)\s+(?:activity|interaction|touch(?:\s?point)?|call|meeting|email)\b"
            r"|\bwhen\s+did\s+(?:we|i)\s+(?:\w+\s+){0,2}(?:speak|talk|meet|call|email|hear)\b"
        ),
    ),
)


def find_focus(lower: str) -> list[Focus]:
    """What the question asks about its records, in the order it asks ("amount and close date")."""
    found = [(m.start(), focus) for focus, pattern in _FOCUS_RULES if (m := pattern.search(lower))]
    return [focus for _, focus in sorted(found)]


def focus_patterns() -> list[str]:
    """The focus rules' patterns (their words are the parser's vocabulary)."""
    return [pattern.pattern for _, pattern in _FOCUS_RULES]


def focus_spans(lower: str) -> list[Span]:
    """Every span the focus rules match (the words a read question's focus was read from)."""
    return [
        Span(focus, m.start(), m.end()) for focus, pattern in _FOCUS_RULES for m in pattern.finditer(lower)
    ]


Rank = Literal["largest", "smallest"]
_RANK_RE = re.compile(
    r"\b(?:(?P<largest>biggest|largest|highest[\s-]value|most\s+valuable|top(?=\s+(?:deal|opportunity|opp)\b))"
    r"|(?P<smallest>smallest|lowest[\s-]value|least\s+valuable))\b"
)


def find_rank(lower: str) -> Span | None:
    """A superlative over deals by amount ("my biggest deal", "the smallest opportunity"), as
    ``"largest"`` / ``"smallest"``."""
    m = _RANK_RE.search(lower)
    if m is None:
        return None
    return Span("largest" if m.group("largest") else "smallest", m.start(), m.end())


# "what's my commission on …", "how much commission do I earn on …": a value asked of records
# by a noun; which nouns are fields is the records' business (their keys), not this rule's.
_ASKED_FIELD_RE = re.compile(
    r"\b(?:what(?:'s|s|\s+is|\s+was|\s+are)|how\s+much|tell\s+me|show\s+me|give\s+me)\s+"
    r"(?:the\s+|my\s+|our\s+|its\s+|their\s+)?(?P<field>[a-z][a-z-]{2,})\s+(?:on|of|for|in|at|do|does|did)\b"
)


def find_asked_field(lower: str) -> Span | None:
    """A field asked for by a word the copilot has no meaning for ("commission", "industry"):
    the span runs from the question word (so "how much" is not also read as the amount)."""
    m = _ASKED_FIELD_RE.search(lower)
    if m is None or m.group("field") in STOPWORDS or m.group("field") in VOCABULARY:
        return None
    return Span(m.group("field"), m.start(), m.end("field"))


def is_question(lower: str) -> bool:
    """A question rather than an instruction ("what's the close date?" vs "set the close date …")."""
    stripped = lower.strip()
    # An instruction that ends with "?" is still an instruction ("push it two weeks?").
    if re.match(
        r"(?:and\s+|so\s+|ok(?:ay)?\s*,?\s+)?(?:push|move|set|change|update|mark|slip|bump|pull|make|put|delay"
        r"|postpone|reschedule|log|draft|write|record|add|create)\b",
        stripped,
    ):
        return False
    if re.match(
        r"(?:please|pls|kindly)\b|(?:can|could|would|will)\s+you\s+(?:please\s+)?(?!tell|show|give|let|remind)",
        stripped,
    ):
        return False
    starts = re.match(
        r"(?:and\s+|so\s+|also\s+|ok(?:ay)?\s*,?\s+)?(?:what|what's|whats|when|when's|how|how's|who|who's|whos|which|where"
        r"|is|are|was|were|does|do|did|has|have|any|tell me|show me|give me|get me|remind me|list|find"
        r"|can you tell|could you tell|i need to know|i'd like to know)\b",
        stripped,
    )
    return starts is not None or stripped.endswith("?")


# --- job titles --------------------------------------------------------------------------

_ACRONYMS: dict[str, str] = {
    "cfo": "chief financial officer",
    "ceo": "chief executive officer",
    "cto": "chief technology officer",
    "coo": "chief operating officer",
    "cio": "chief information officer",
    "cmo": "chief marketing officer",
    "cro": "chief revenue officer",
    "cpo": "chief procurement officer",
    "ciso": "chief information security officer",
    "vp": "vice president",
    "svp": "vice president",
    "evp": "vice president",
}
# Words of job titles, by the concept they name (word stems). A title matches a question
# when they share a function (finance, procurement…), or only a rank when no function was asked.
_FUNCTIONS: dict[str, tuple[str, ...]] = {
    "finance": ("financ", "budget", "treasur", "account"),
    "procurement": ("procure", "purchas", "buyer", "buying", "sourcing", "vendor"),
    "operations": ("operat", "ops"),
    "technology": ("technolog", "tech", "it", "information", "engineer", "digital", "systems"),
    "security": ("secur",),
    "supply": ("supply", "chain", "logistic", "fleet"),
    "facilities": ("facilit",),
    "marketing": ("marketing",),
    "sales": ("sales", "revenue", "commercial"),
    "legal": ("legal", "counsel", "contract"),
    "people": ("hr", "human", "talent"),
    "executive": ("executive", "founder", "owner", "president", "managing"),
}
_RANKS: dict[str, tuple[str, ...]] = {
    "chief": ("chief", "cxo"),
    "head": ("head", "vice", "vp", "director", "lead", "leader", "manager", "officer"),
}
_TITLE_WORD_RE = re.compile(
    r"\b(?:c[efotimrp]o|ciso|s?vp|evp|chief|head|heads|director|directors|manager|managers|lead|leader|officer"
    r"|vice\s+president|president|finance|financial|procurement|purchasing|buyer|sourcing|operations|ops"
    r"|technology|technical|information|engineering|security|supply\s+chain|supply|logistics|facilities"
    r"|marketing|sales|revenue|legal|counsel|hr|human\s+resources|budgets?)\b",
    re.I,
)
# "IT" as typed, or "it" right before a job word ("the it director"); never the pronoun.
_IT_RE = re.compile(r"\bIT\b|\b[Ii][Tt]\s+(?=(?i:director|manager|lead|head|department|team|admin))")
_RANK_OR_ROLE_RE = re.compile(
    r"\b(?:c[efotimrp]o|ciso|s?vp|evp|chief|head\s+of|director|manager|lead|leader|officer|vice\s+president|buyer)\b",
    re.I,
)


def title_spans(text: str) -> list[Span]:
    """The job-title words of ``text`` ("CFO", "head of procurement", "IT director"), as spans."""
    spans = [Span(m.group(0), m.start(), m.end()) for m in _TITLE_WORD_RE.finditer(text)]
    for m in _IT_RE.finditer(text):
        spans.append(Span("it", m.start(), m.start() + 2))
    return sorted(spans, key=lambda s: s.start)


def asks_for_a_title(text: str) -> bool:
    """Whether the text names a job (a rank or an acronym: "the CFO", "head of procurement")."""
    return _RANK_OR_ROLE_RE.search(text) is not None or _IT_RE.search(text) is not None


def _concepts(words: list[str]) -> tuple[set[str], set[str]]:
    expanded: list[str] = []
    for word in words:
        expanded += _ACRONYMS.get(word.lower(), word.lower()).split()
    functions = {
        name for name, stems in _FUNCTIONS.items() for w in expanded if any(w.startswith(s) for s in stems)
    }
    # "IT" only counts as a whole word (not the start of "italy").
    functions |= {"technology"} if "it" in expanded else set()
    ranks = {name for name, stems in _RANKS.items() for w in expanded if any(w.startswith(s) for s in stems)}
    if "president" in expanded and "vice" not in expanded:
        functions.add("executive")
    return functions, ranks


def title_exact(asked: list[str], title: str) -> bool:
    """Whether ``title`` has every rank asked for ("CFO" is a chief; an IT director is not a CTO)."""
    _, want_ranks = _concepts(asked)
    _, have_ranks = _concepts(re.findall(r"[A-Za-z]+", title))
    return want_ranks <= have_ranks


def title_score(asked: list[str], title: str) -> int:
    """How well a contact's ``title`` fits the job words asked for (0 = not at all)."""
    want_functions, want_ranks = _concepts(asked)
    have_functions, have_ranks = _concepts(re.findall(r"[A-Za-z]+", title))
    if "it" in {w.lower() for w in re.findall(r"[A-Za-z]+", title) if w == "IT"}:
        have_functions.add("technology")
    shared = want_functions & have_functions
    if want_functions and not shared:
        return 0
    ranks = want_ranks & have_ranks
    if not want_functions and not ranks:
        return 0
    return 2 * len(shared) + len(ranks)


# --- typos -------------------------------------------------------------------------------

VOCABULARY: tuple[str, ...] = (
    "summarise", "summarize", "summary", "overview", "opportunity", "opportunities", "pipeline",
    "forecast", "contacts", "contact", "activity", "activities", "meeting", "meetings", "renewal",
    "renewals", "expansion", "negotiation", "proposal", "qualification", "prospecting", "procurement",
    "purchasing", "financial", "finance", "director", "manager", "officer", "yesterday", "tomorrow",
    "quarter", "closing", "amount", "stakeholders", "discussed", "interactions", "recently", "happening",
    "history", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday",
    "january", "february", "march", "april", "august", "september", "october", "november", "december",
    "upgrade", "rollout", "analytics", "update", "status", "worth", "people", "operations", "months",
    "weeks", "deals", "next", "step", "steps",
)  # fmt: skip
# Ordinary words that are one letter away from a vocabulary word: never "corrected".
_REAL_WORDS = frozenset(
    [
        "contract",
        "contracts",
        "content",
        "context",
        "contacted",
        "quarterly",
        "monthly",
        "weekly",
        "meetup",
        "proposals",
        "process",
        "prospect",
        "prospects",
        "activate",
        "active",
        "renewed",
        "renewing",
        "expanding",
        "expansive",
        "forecasts",
        "statuses",
        "summaries",
        "summit",
        "director's",
        "managers",
        "officers",
        "meeting's",
        "update's",
        "dealer",
        "dealers",
    ]
)
_WORD_RE = re.compile(r"[A-Za-z][A-Za-z'’]*")


def correct_typos(text: str) -> str:
    """``text`` with misspelt vocabulary words corrected ("oppertunities" → "opportunities").

    Only words of five letters or more that are not vocabulary already and are very close
    to exactly one vocabulary word; names are left alone (they are rarely that close to a
    CRM word, and a capitalised word after the first is taken for a name).
    """
    out: list[str] = []
    position = 0
    for index, m in enumerate(_WORD_RE.finditer(text)):
        word = m.group(0)
        lower = word.lower()
        out.append(text[position : m.start()])
        position = m.end()
        replacement = word
        if (
            len(lower) >= 5
            and lower not in STOPWORDS
            and lower not in VOCABULARY
            and lower not in _REAL_WORDS
        ):
            capitalised_name = index > 0 and word[:1].isupper()
            close = get_close_matches(lower, VOCABULARY, n=2, cutoff=0.84)
            if close and not capitalised_name and (len(close) == 1 or close[0][:4] == close[1][:4]):
                replacement = close[0]
        out.append(replacement)
    out.append(text[position:])
    return "".join(out)
