"""The offline model's honest limit: it answers only a question it has read completely.

A read question is read completely when every word of it is placed: a word of the parser's
vocabulary (function words, intent cues, fields, dates, stages, job titles, ids; or a near
typo of one) or a word of a record the conversation's reads returned (an account's, a deal's
or a contact's name, a title, a city), or of a bound tool's title. A word that is none of
these changes the meaning in a way the model does not understand ("capital", "risk",
"weather"): answering the rest would answer a neighbouring question with confidence. Instead
the rep gets a plain "I can't … yet", the words it could not place, and what it can do.

The word a value is asked by ("what's the weather in Denver?") is left unplaced by the parse:
only an answer about that field of the records read places it (its value, or that the rep
cannot see one); any other answer ("which Denver account?") has not understood it.

One run of such words in the place of a name is the name asked about: the plan's own answer
(which account, no account matching it, the unread floor) already says so, as long as it
shows no records. Words still to be searched as names are searched first (a word is only
known not to be a name once the rep's accounts were listed, :func:`lookup.unmatched_words`);
a read that may explain them (a deal's name) is made first, and the limit then cites only the
record the rep named.
Nothing here lists words that are unsupported: only what is understood is listed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from difflib import get_close_matches
from typing import Any

from langchain_core.messages import BaseMessage

from offline_model import compose as c
from offline_model import generic_read, generic_write, settings_write
from offline_model.context import PlanContext
from offline_model.intents import CUE_WORDS, WRITE_INTENTS, change_words
from offline_model.questions import VOCABULARY
from offline_model.records import cited
from offline_model.state import every_result
from offline_model.steps import Step, answer
from offline_model.text import STOPWORDS, NameRun

FRAMING: frozenset[str] = frozenset(
    # How a rep frames a question about records, with no meaning of its own for the CRM:
    # "right now", "at the moment", "how's it looking", "where does it stand", "sum up".
    [
        "right",
        "moment",
        "looking",
        "looks",
        "stand",
        "stands",
        "standing",
        "plan",
        "plans",
        "sum",
        "name",
        "names",
        "earn",
        "earns",
        "shape",
        "going",
        "doing",
        "tell",
        "like",
        "please",
        "kind",
        "sort",
        "bit",
    ]
)
"""Words that frame a read question and change nothing of what it asks."""
NAME_KEYS = (
    "name",
    "title",
    "subject",
    "industry",
    "city",
    "territory",
    "stage",
    "type",
    "section",
    "snippet",
)
"""Keys of tool-result objects whose text names the record (its words are the record's); a
document's snippet is what a search of the rep's own words found, so its words are read too
("what does the field guide say about the depot pilot?" is answered from the guide)."""
TYPO_CUTOFF = 0.84
"""How alike a word and a vocabulary word must be to be read as a typo of it (as the parser's)."""
_KNOWN = tuple(sorted(STOPWORDS | FRAMING | set(VOCABULARY) | CUE_WORDS))
_KNOWN_SET = frozenset(_KNOWN)
_WORD = re.compile(r"[a-z0-9][a-z0-9&'’-]*")


def _words(text: str) -> list[str]:
    return [re.sub(r"['’]s$", "", w).strip("'’-") for w in _WORD.findall(text.lower())]


def _understood(word: str) -> bool:
    """A vocabulary or framing word, a number, or a near typo of a vocabulary word."""
    if not word or word in _KNOWN_SET or word.isdigit() or len(word) < 2:
        return True
    if len(word) >= 4 and not _KNOWN_SET.isdisjoint(_one_edit(word)):
        return True  # "waht", "sohw", "nmae": one slip of the keyboard
    if len(word) == 3 and not _KNOWN_SET.isdisjoint(_swaps(word)):
        return True  # "woh": a short word, only its letters swapped
    return len(word) >= 3 and bool(get_close_matches(word, _KNOWN, n=1, cutoff=TYPO_CUTOFF))


def _swaps(word: str) -> set[str]:
    return {word[:i] + word[i + 1] + word[i] + word[i + 2 :] for i in range(len(word) - 1)}


def _one_edit(word: str) -> set[str]:
    """Every string one deletion, swap of neighbours, replacement or insertion from ``word``."""
    letters = "abcdefghijklmnopqrstuvwxyz"
    splits = [(word[:i], word[i:]) for i in range(len(word) + 1)]
    return (
        {a + b[1:] for a, b in splits if b}
        | {a + b[1] + b[0] + b[2:] for a, b in splits if len(b) > 1}
        | {a + ch + b[1:] for a, b in splits if b for ch in letters}
        | {a + ch + b for a, b in splits for ch in letters}
    )


def record_words(messages: Sequence[BaseMessage], titles: Iterable[str] = ()) -> set[str]:
    """Every word of the records the conversation's reads returned (names, titles, cities) and
    of the bound tools' titles: what the rep may name."""
    found: set[str] = set()

    def visit(value: Any) -> None:
        if isinstance(value, dict):
            for key, item in value.items():
                if key in NAME_KEYS and isinstance(item, str):
                    found.update(_words(item))
                else:
                    visit(item)
        elif isinstance(value, list):
            for item in value:
                visit(item)

    for _, result in every_result(messages):
        visit(result.data)
    for title in titles:
        found.update(_words(title))
    return found


def unplaced_runs(runs: Sequence[NameRun], known: set[str]) -> list[str]:
    """The runs (as the rep typed them) holding a word neither understood nor a record's."""
    out: list[str] = []
    for run in runs:
        open_words = [w for w in _words(run.text) if not _understood(w)]
        placed = [w for w in open_words if any(k.startswith(w) for k in known)]
        # A run typed as a name is one name: a record found by part of it is the one it names
        # ("Vandelay Holdings" finds Vandelay); a run of ordinary words must be placed word by word.
        if open_words and (not placed if run.firm else len(placed) < len(open_words)):
            out.append(run.text)
    return out


def _named_record(ctx: PlanContext) -> tuple[str, str] | None:
    """The account or deal this question read whose name the rep typed most of (id, name):
    the record a limit may point to ("Kestrel Aviation", not "Kestrel Aviation — Renewal")."""
    typed = set(_words(ctx.req.text))
    best: tuple[tuple[float, int], str, str] | None = None
    for _, result in ctx.turn.results():
        for item in [result.obj, *result.items]:
            name, ident = item.get("name"), item.get("id")
            if not isinstance(name, str) or not isinstance(ident, str):
                continue
            words = {w for w in _words(name) if w.isalpha()}
            # Most of its name typed, then the most words of it: a deal named in full
            # ("Granite Energy — Expansion") over its account.
            score = (len(words & typed) / len(words) if words else 0.0, len(words & typed))
            own = {w for w in words if not _understood(w)}
            if own & typed and (best is None or score > best[0]):
                best = (score, ident, name)
    return (best[1], best[2]) if best else None


def limit_text(ctx: PlanContext, unplaced: Sequence[str], named: tuple[str, str] | None) -> str:
    """ "I can't … yet", the words not understood, and what can be done instead."""
    quoted = ", ".join(f'"{w}"' for w in unplaced[:3])
    lines = [
        f"I can't answer that yet: I don't understand {quoted} in your question, "
        "so I won't guess at a different one."
    ]
    if named is not None:
        ident, name = named
        lines.append(f"About {name} {c.cite(ident)}, I can tell you its deals, contacts and recent activity.")
    lines.append(c.help_text(ctx.tools.has))
    return "\n".join(lines)


def honest(ctx: PlanContext, step: Step, messages: Sequence[BaseMessage], not_names: set[str]) -> Step:
    """``step``, unless it answers (or reads data for) a read question with words it has not
    placed: then the honest limit. ``not_names``: words searched as names that no visible
    account has (known once the accounts were listed)."""
    req = ctx.req
    if any(i in WRITE_INTENTS or i.startswith("preferences") for i in req.intents) or not req.rest:
        return step
    if (
        generic_read.requested_read(ctx) is not None
        or generic_write.requested_tool(ctx) is not None
        or settings_write.requested_setting(ctx) is not None
    ):
        # Asked for by a bound tool's title ("what changed since Friday?" for "What changed"):
        # the tool reads what the words mean.
        return step
    search = ctx.tools.name("knowledge_search")
    if search and any(call.result is not None and call.result.items for call in ctx.turn.all(search)):
        # The documents a search of the rep's own words found answer it, in their words.
        return step
    titles = [tool.title for tool in ctx.tools.tools.values() if tool.title]
    known = record_words(messages, titles)
    if req.asked_field and not step.calls and req.asked_field in _words(step.answer):
        # A value asked by a word (the parse leaves it unplaced) is placed by an answer about
        # that field of the records read: its value, or that the rep cannot see one. Asked of
        # nothing found ("the capital of France") or answered with something else ("which
        # Denver account?" for "the weather in Denver"), it was not understood.
        known.add(req.asked_field)
    unplaced = unplaced_runs(req.open_runs, known)
    # A change verb in a question ("what changed", "which deals did I move") asks about
    # changes, which no read the parse planned answers.
    other = list(dict.fromkeys(change_words(req.rest)))
    if not unplaced and not other:
        return step
    search = ctx.tools.name("account_search")
    if step.calls and not other:
        searching = all(call.name == search for call in step.calls)
        # Known not to be names: searched for, and no visible account has them (once listed).
        settled = [run for run in unplaced if set(_words(run)) & {w for n in not_names for w in _words(n)}]
        if not searching or len(settled) < 2:
            return step  # a name, or a deal's words: read them, then decide
    # An answer that asks back ("which account?", "did you mean …?") answers nothing yet.
    asks_back = step.answer.rstrip().endswith("?")
    shows_records = bool(step.calls) or (bool(cited(step.answer)) and not asks_back)
    about_another = asks_back and unplaced[0].lower() not in step.answer.lower() if unplaced else False
    # The word a value was asked by is never the name asked about (the parse searched no name by it).
    a_name = len(unplaced) == 1 and unplaced[0].lower() != req.asked_field
    if a_name and not other and not shows_records and not about_another:
        # The name asked about: "which account?", "no account matching …". An ask-back about
        # another word ("which Denver account?" for "who won the world cup in Denver") answers nothing.
        return step
    unplaced = other + unplaced
    return answer(limit_text(ctx, unplaced, _named_record(ctx)))
