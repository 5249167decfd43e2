"""Proof: phone numbers in every common format never reach the model (invariant 9).

A seeded generator writes real (valid) numbers of the home and common regions in every
format reps and CRMs use: E.164, international with any separators and ``(0)``, ``00``
and ``011`` dialling prefixes, national with spaces, dots, dashes and brackets, bare
digits, ``tel:`` URIs, extensions, vanity letters and 7-digit local numbers. Each goes
into the rep's message and into a CRM tool result (JSON as the CRM returns it, plain or as
content blocks), and the real middleware chain runs its before-model hooks on that
state. A trial passes only if what the model would receive is the input with exactly the
phone number replaced: no digit of it left, and nothing around it (dates, amounts, ids)
touched. A second suite feeds the same chain text full of things that are not phone
numbers and requires it to come through unchanged.

``COPILOT_SOAK=1`` (``make soak``) runs the full counts.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from typing import Any

import phonenumbers
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from phonenumbers import PhoneNumber, PhoneNumberFormat, PhoneNumberType

from copilot.citations import message_text
from copilot.middleware.pii import pii_middleware
from tests.adversarial.counts import Tally, count

TRIALS = count(400, 5000)
SEED = 20260615
REDACTED = "[REDACTED_PHONE_NUMBER]"
EMAIL = "maria.garcia@acme.example"
NO_RUNTIME: Any = None  # the PII hooks never touch the runtime

HOME = "US"
REGIONS = ("US", "US", "US", "GB", "DE", "FR", "IN", "AU")  # the home region most often
US_AREA_CODES = ("206", "212", "305", "312", "404", "415", "425", "512", "617", "646", "720", "917")
VANITY_WORDS = ("FLOWERS", "CONTACT", "GET-HELP", "GOT-JUNK", "CALL-ATT", "NEW-CARS", "Flowers")
EXTENSIONS = (" x{n}", " x {n}", " ext. {n}", " ext {n}", " extension {n}", " Ext. {n}")

# --- numbers --------------------------------------------------------------------------------


def _valid_number(rng: random.Random, region: str) -> PhoneNumber:
    """A random number that the region's numbering plan says exists."""
    for _ in range(200):
        if region == "US":
            nsn = rng.choice(US_AREA_CODES) + str(rng.randint(2, 9)) + f"{rng.randint(0, 999_999):06d}"
        else:
            kind = rng.choice((PhoneNumberType.FIXED_LINE, PhoneNumberType.MOBILE))
            example = phonenumbers.example_number_for_type(region, kind)
            assert example is not None
            base = phonenumbers.national_significant_number(example)
            keep = max(2, len(base) - rng.randint(4, 6))
            nsn = base[:keep] + "".join(str(rng.randint(0, 9)) for _ in range(len(base) - keep))
        number = phonenumbers.parse(nsn, region)
        if phonenumbers.is_valid_number(number):
            return number
    raise AssertionError(f"no valid {region} number generated")


def _groups(number: PhoneNumber) -> list[str]:
    """The national significant number's digit groups, as the library formats them."""
    international = phonenumbers.format_number(number, PhoneNumberFormat.INTERNATIONAL)
    return international.replace("-", " ").split()[1:]


def _national_groups(number: PhoneNumber) -> list[str]:
    national = phonenumbers.format_number(number, PhoneNumberFormat.NATIONAL)
    return national.replace("(", "").replace(")", "").replace("-", " ").split()


Format = Callable[[PhoneNumber, random.Random], str | None]


def _e164(n: PhoneNumber, rng: random.Random) -> str:
    return phonenumbers.format_number(n, PhoneNumberFormat.E164)


def _international(n: PhoneNumber, rng: random.Random) -> str:
    sep = rng.choice((" ", "-", ".", " "))
    return f"+{n.country_code}{sep}" + sep.join(_groups(n))


def _international_trunk(n: PhoneNumber, rng: random.Random) -> str | None:
    if phonenumbers.region_code_for_number(n) in ("US", "IN"):
        return None  # "(0)" is how GB, DE, FR and AU write the trunk prefix
    groups = _groups(n)
    return f"+{n.country_code} (0){groups[0]} " + " ".join(groups[1:])


def _dialling_prefix(n: PhoneNumber, rng: random.Random) -> str:
    idd = "011" if n.country_code != 1 and rng.random() < 0.3 else "00"
    return f"{idd} {n.country_code} " + rng.choice((" ", "-")).join(_groups(n))


def _national(n: PhoneNumber, rng: random.Random) -> str:
    return phonenumbers.format_number(n, PhoneNumberFormat.NATIONAL)


def _national_separators(n: PhoneNumber, rng: random.Random) -> str:
    groups = _national_groups(n)
    style = rng.choice(("dash", "dot", "space", "bracket", "slash"))
    if style == "bracket":
        return f"({groups[0]}) " + " ".join(groups[1:])
    if style == "slash":
        return f"{groups[0]}/" + "".join(groups[1:])
    sep = {"dash": "-", "dot": ".", "space": " "}[style]
    return sep.join(groups)


def _bare_national(n: PhoneNumber, rng: random.Random) -> str | None:
    digits = "".join(_national_groups(n))
    # A bare run of fewer than 10 digits is read as an amount or id (documented in pii.py).
    return digits if len(digits) >= 10 else None


def _tel_uri(n: PhoneNumber, rng: random.Random) -> str:
    return phonenumbers.format_number(n, PhoneNumberFormat.RFC3966)


def _with_extension(base: Format) -> Format:
    def formatted(n: PhoneNumber, rng: random.Random) -> str | None:
        text = base(n, rng)
        if text is None or text.startswith("tel:"):
            return None
        return text + rng.choice(EXTENSIONS).format(n=rng.randint(1, 99999))

    return formatted


NUMBER_FORMATS: tuple[Format, ...] = (
    _e164,
    _international,
    _international_trunk,
    _dialling_prefix,
    _national,
    _national_separators,
    _bare_national,
    _tel_uri,
    _with_extension(_international),
    _with_extension(_national),
    _with_extension(_national_separators),
)


def _vanity(rng: random.Random) -> str:
    word = rng.choice(VANITY_WORDS)
    code = rng.choice(("800", "888", "877", "866"))
    if word != word.upper():
        return f"1-{code}-{word}"  # mixed case is read only dash-joined (not "1 800 Broadway")
    return rng.choice(
        (f"1-{code}-{word}", f"1 ({code}) {word}", f"+1 {code} {word}", f"({code}) {word}", f"{code}-{word}")
    )


def _toll_free_digits(rng: random.Random) -> str:
    line = f"{rng.randint(200, 999)} {rng.randint(0, 9999):04d}"
    return rng.choice((f"+1 800 {line}", f"1-800-{line.replace(' ', '-')}", f"1 (888) {line}"))


def _local(rng: random.Random) -> str:
    return f"{rng.randint(2, 9)}{rng.randint(0, 99):02d}-{rng.randint(0, 9999):04d}"


def phone(rng: random.Random) -> tuple[str, str]:
    """One phone number in one randomly chosen format, and what the model should see instead.

    Only a ``tel:`` URI keeps something (its scheme, which holds no digit).
    """
    written = _written(rng)
    return written, ("tel:" + REDACTED if written.startswith("tel:") else REDACTED)


def _written(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.06:
        return _vanity(rng)
    if roll < 0.10:
        return _toll_free_digits(rng)
    if roll < 0.16:
        return _local(rng)
    while True:
        number = _valid_number(rng, rng.choice(REGIONS))
        text = rng.choice(NUMBER_FORMATS)(number, rng)
        if text is not None:
            return text


# --- where numbers appear ---------------------------------------------------------------------

SENTENCES = (
    "Call Maria on {p} before the 2026-12-15 close.",
    "her mobile is {p}",
    "{p}",
    "Reach him at {p} (ask for Sam) about opp-acme-renewal.",
    "Numbers: {p}; the deal is $120,000 at 60%.",
    "Left a voicemail on {p} at 10:30, 3 open opportunities left.",
    "Phone: {p}\nNotes: renewal v2.10.4 ships in Q3 2026.",
    "Can you log that I called {p} and update acc-acme?",
)


def _tool_result(rng: random.Random, phone_text: str, redacted: str) -> tuple[Any, Any]:
    """A CRM contact list (input, expected) as the CRM's JSON text, or as content blocks."""
    contact = {
        "id": f"con-{rng.randint(1, 9999):04d}",
        "name": "Maria Garcia",
        "title": "VP Operations",
        "phone": phone_text,
        "account_id": "acc-acme",
        "updated": "2026-12-15T10:30:00Z",
    }
    other = {"id": "opp-acme-renewal", "amount": 120000.5, "close_date": "2026-12-15", "version": 3}
    text = json.dumps({"items": [contact, other]})
    expected = json.dumps({"items": [{**contact, "phone": redacted}, other]})
    if rng.random() < 0.3:
        return [{"type": "text", "text": text}], [{"type": "text", "text": expected}]
    return text, expected


def _state(question: str, tool_content: Any) -> dict[str, Any]:
    return {
        "messages": [
            HumanMessage(question, id="h1"),
            AIMessage(
                "",
                id="a1",
                tool_calls=[{"name": "list_contacts", "args": {"account_id": "acc-acme"}, "id": "call_1"}],
            ),
            ToolMessage(tool_content, tool_call_id="call_1", name="list_contacts", id="t1"),
        ]
    }


async def _what_the_model_receives(state: dict[str, Any]) -> list[BaseMessage]:
    """The state after the agent's PII hook (email, then phone) ran."""
    messages: list[BaseMessage] = state["messages"]
    current: Any = state  # the agent state the hook reads
    update = await pii_middleware(HOME).abefore_model(current, NO_RUNTIME)
    return messages if update is None else update["messages"]


def _content(message: BaseMessage) -> Any:
    return message.content if isinstance(message.content, list) else message_text(message)


async def test_phone_numbers_in_every_common_format_never_reach_the_model():
    rng = random.Random(SEED)
    tally = Tally("pii-phone-formats")
    for _ in range(TRIALS):
        (asked, asked_redacted), (listed, listed_redacted) = phone(rng), phone(rng)
        template = rng.choice(SENTENCES)
        question = f"{template.format(p=asked)} Also email {EMAIL}."
        expected_question = f"{template.format(p=asked_redacted)} Also email [REDACTED_EMAIL]."
        tool_content, expected_tool = _tool_result(rng, listed, listed_redacted)

        received = await _what_the_model_receives(_state(question, tool_content))

        human, tool = message_text(received[0]), _content(received[2])
        tally.record(
            human == expected_question and tool == expected_tool,
            f"asked {asked!r} -> {human!r}; listed {listed!r} -> {tool!r}",
        )
    tally.assert_clean()


# --- what is not a phone number ---------------------------------------------------------------


def _not_a_phone(rng: random.Random) -> str:
    year = rng.randint(2020, 2030)
    day = f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
    choices = (
        day,
        f"{day}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:00Z",
        f"{day} {rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}",
        f"{rng.randint(1, 12):02d}/{rng.randint(1, 28):02d}/{year}",
        f"{rng.randint(0, 23)}:{rng.randint(0, 59):02d}",
        f"${rng.randint(1, 999)},{rng.randint(0, 999):03d}",
        f"${rng.randint(1, 9)},{rng.randint(0, 999):03d},{rng.randint(0, 999):03d}.{rng.randint(0, 99):02d}",
        f"{rng.randint(1000, 9_999_999)}.{rng.randint(0, 99):02d}",
        str(rng.randint(1, 999_999)),
        f"opp-{rng.randint(1, 9999):04d}",
        f"con-{rng.randint(1, 9999):04d}",
        rng.choice(("opp-acme-renewal", "acc-acme", "acc-globex", "opp-initech-expansion")),
        f"audit #{rng.randint(1, 9_999_999)}",
        f"FY{year}",
        f"Q{rng.randint(1, 4)} {year}",
        f"v{rng.randint(1, 20)}.{rng.randint(0, 40)}.{rng.randint(0, 99)}",
        f"{rng.randint(0, 100)}%",
        f"{rng.randint(1, 99)}.{rng.randint(0, 9)}%",
        f"{rng.randint(1, 40)} open opportunities",
        f"{rng.randint(1, 9999)} Microsoft Way, Redmond, WA {rng.randint(10000, 99999)}",
        f"{rng.randint(1, 9999)} {rng.choice(('BROADWAY', 'MICROSOFT WAY', 'Broadway'))}",
        f"{rng.choice(('1', '1855', 'Suite 1'))} 800 Broadway",
        f"WA {rng.randint(10000, 99999)}-{rng.randint(0, 9999):04d}",
    )
    return rng.choice(choices)


async def test_dates_amounts_ids_and_addresses_reach_the_model_unchanged():
    rng = random.Random(SEED + 1)
    tally = Tally("pii-phone-negatives")
    for _ in range(TRIALS):
        sentence = ", ".join(_not_a_phone(rng) for _ in range(rng.randint(1, 4)))
        record = {"id": _not_a_phone(rng), "value": _not_a_phone(rng), "amount": rng.randint(1, 99_999_999)}
        tool_content = json.dumps(record)
        state = _state(f"what changed: {sentence}?", tool_content)

        received = await _what_the_model_receives(state)

        unchanged = [message_text(m) for m in received] == [message_text(m) for m in state["messages"]]
        tally.record(unchanged, f"{sentence!r} / {tool_content!r} -> {[message_text(m) for m in received]}")
    tally.assert_clean()
