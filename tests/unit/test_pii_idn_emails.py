"""Internationalised email addresses are redacted like ASCII ones; at-signs that are no address stay.

Property tests (hypothesis) generate Unicode local parts from every script's letters,
marks and digits, IDN domains in Unicode and (through the ``idna`` package) in punycode,
and put them in sentences of several languages, quotes, brackets, URLs and CRM JSON; none
may survive. LangChain's ASCII ``detect_email`` stays a lower bound: whatever it finds is
found. The examples pin the escapes, the full-width forms and the negatives.
"""

from __future__ import annotations

import json
import string

import idna
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from langchain.agents.middleware.pii import detect_email as langchain_detect_email

from copilot.redaction import detect_email, redact_pii
from tests.adversarial.counts import count
from tests.support.idn_emails import (
    ASCII_DOMAINS,
    LOCAL_PARTS,
    NOT_ADDRESSES,
    REDACTED,
    SENTENCES,
    UNICODE_DOMAINS,
    WRAPPERS,
    full_width,
    in_context,
    punycode,
)

# No deadline: the redaction's speed is not what these properties are about. ``make soak``'s
# COPILOT_SOAK=1 searches longer.
PROPERTY = settings(max_examples=count(150, 2500), deadline=None)

# --- addresses from every script ------------------------------------------------------------------

_LETTER = st.characters(categories=("Lu", "Ll", "Lt", "Lm", "Lo"))
_LETTER_MARK_DIGIT = st.characters(categories=("Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc", "Nd"))
_LETTER_MARK = st.characters(categories=("Lu", "Ll", "Lt", "Lm", "Lo", "Mn", "Mc"))


def _word(rest: st.SearchStrategy[str], min_rest: int = 0) -> st.SearchStrategy[str]:
    return st.builds(str.__add__, _LETTER, st.text(rest, min_size=min_rest, max_size=8))


_ANY_LOCAL = st.lists(_word(_LETTER_MARK_DIGIT), min_size=1, max_size=3).map(".".join)
_ANY_LABEL = st.one_of(
    _word(_LETTER_MARK_DIGIT),
    st.builds(lambda a, b: f"{a}-{b}", _word(_LETTER_MARK_DIGIT), _word(_LETTER_MARK_DIGIT)),
)
_ANY_TLD = _word(_LETTER_MARK, min_rest=1)
_ANY_DOMAIN = st.builds(
    lambda labels, tld: ".".join([*labels, tld]), st.lists(_ANY_LABEL, min_size=1, max_size=3), _ANY_TLD
)

# One script per label, as registries require, so IDNA 2008 gives each domain a punycode form.
_SCRIPTS = {
    "latin": ("abcdefghijklmnopqrstuvwxyz", "äöüßéèêçñåøæłőűşğı"),
    "greek": ("αβγδεζηθικλμνξοπρστυφχψω", "άέήίόύώ"),
    "cyrillic": ("абвгдежзийклмнопрстуфхцчшщыэюя", "ёїієґ"),
    "armenian": ("աբգդեզէըթժիլխծկհձղճմյնշոչպջռսվտրցւփքօֆ", ""),
    "georgian": ("აბგდევზთიკლმნოპჟრსტუფქღყშჩცძწჭხჯჰ", ""),
    "hebrew": ("אבגדהוזחטיכלמנסעפצקרשת", ""),
    "arabic": ("ابتثجحخدذرزسشصضطظعغفقكلمنهوي", ""),
    "devanagari": ("कखगघचछजझटठडढणतथदधनपफबभमयरलवशषसह", "ािीुूेैोौं"),
    "tamil": ("கஙசஞடணதநபமயரலவழளறன", "ாிீுூெேை"),
    "thai": ("กขคงจฉชซญดตถทธนบปผพฟภมยรลวศษสหอฮ", ""),
    "han": ("中国例子用户电子邮件测试公司网络", ""),
    "kana": ("あいうえおかきくけこさしすせそアイウエオカキクケコ", ""),
    "hangul": ("가나다라마바사아자차카타파하", ""),
}


@st.composite
def _script_word(draw: st.DrawFn, min_size: int = 1) -> str:
    letters, marks = _SCRIPTS[draw(st.sampled_from(sorted(_SCRIPTS)))]
    first = draw(st.sampled_from(letters))
    rest = draw(st.text(st.sampled_from(letters + marks), min_size=min_size - 1, max_size=7))
    return first + rest


@st.composite
def _idn_domain(draw: st.DrawFn) -> tuple[str, str]:
    """An IDN domain from real scripts, and its punycode form (IDNA 2008 via UTS #46)."""
    labels = draw(st.lists(_script_word(), min_size=1, max_size=3))
    domain = ".".join([*labels, draw(_script_word(min_size=2))])
    try:
        encoded = idna.encode(domain, uts46=True).decode("ascii")
    except idna.IDNAError:
        assume(False)  # e.g. a mixed right-to-left domain the bidi rule refuses
        raise
    return domain, encoded


_PLACES = st.tuples(st.sampled_from(SENTENCES), st.sampled_from(WRAPPERS))


def _none_survive(email: str, place: tuple[str, str]) -> None:
    sentence, wrapper = place
    written = in_context(email, sentence, wrapper)
    assert redact_pii(written.text) == written.expected


@PROPERTY
@given(local=_ANY_LOCAL, domain=_ANY_DOMAIN, place=_PLACES)
def test_an_address_of_any_scripts_letters_marks_and_digits_never_survives_wherever_it_is_written(
    local: str, domain: str, place: tuple[str, str]
):
    _none_survive(f"{local}@{domain}", place)


@PROPERTY
@given(local=st.one_of(_ANY_LOCAL, st.sampled_from(LOCAL_PARTS)), domains=_idn_domain(), place=_PLACES)
def test_an_idn_domain_in_unicode_or_in_punycode_never_survives(
    local: str, domains: tuple[str, str], place: tuple[str, str]
):
    unicode_domain, ascii_domain = domains
    for domain in (unicode_domain, ascii_domain, ascii_domain.upper(), unicode_domain.replace(".", "。")):
        _none_survive(f"{local}@{domain}", place)


@PROPERTY
@given(local=_ANY_LOCAL, domains=_idn_domain(), ascii_only=st.booleans())
def test_an_address_in_crm_json_never_survives_escaped_or_not(
    local: str, domains: tuple[str, str], ascii_only: bool
):
    email = f"{local}@{domains[0]}"
    record = {"id": "con-0042", "name": "María García", "email": email, "notes": f"Email:\n{email}"}

    redacted = redact_pii(json.dumps(record, ensure_ascii=ascii_only))

    assert json.loads(redacted) == {**record, "email": REDACTED, "notes": f"Email:\n{REDACTED}"}


@PROPERTY
@given(
    local=st.sampled_from(("maria.garcia", "tanaka", "info", "first_last")),
    domain=st.sampled_from(ASCII_DOMAINS),
)
def test_a_full_width_address_typed_with_an_ime_never_survives(local: str, domain: str):
    written = full_width(f"{local}@{domain}")
    assert redact_pii(f"メールは {written} まで。") == f"メールは {REDACTED} まで。"


# --- ASCII addresses: LangChain's detector is the lower bound ------------------------------------

# A local part opens with a letter or digit (a dot-atom cannot open with a dot; ".@0.A" +
# "A@0.AA" is two readings of one string, not two addresses).
_ASCII_LOCAL = st.builds(
    str.__add__,
    st.sampled_from(string.ascii_letters + string.digits),
    st.text(string.ascii_letters + string.digits + "._+-'", max_size=11),
)
_ASCII_DOMAIN = st.text(string.ascii_letters + string.digits + ".-", min_size=1, max_size=12)
_ASCII_TLD = st.text(string.ascii_letters, min_size=1, max_size=5)
_ASCII_EMAILISH = st.builds(
    lambda loc, dom, tld: f"{loc}@{dom}.{tld}", _ASCII_LOCAL, _ASCII_DOMAIN, _ASCII_TLD
)
# Everything but at-signs (so every "@" has a local part before it), the escape starters (% \ &, read as the decoded text) and "|" (a
# stray character in LangChain's TLD class, "[A-Z|a-z]").
_ASCII_NOISE = st.text(string.ascii_letters + string.digits + " .,;:!?<>()[]{}\"'/=#*_+-\n", max_size=12)


# Pieces end at a character no address has (two addresses glued into one run, "a@b.cc@d.ee",
# are two readings of one string, and the two patterns may read it differently).
_ASCII_SEPARATOR = st.sampled_from(' ,;:!?<>()[]{}"/=#*\n')
_ASCII_TEXT = st.lists(
    st.tuples(st.one_of(_ASCII_EMAILISH, _ASCII_NOISE), _ASCII_SEPARATOR), min_size=1, max_size=6
).map(lambda pieces: "".join(piece + end for piece, end in pieces))


@PROPERTY
@given(_ASCII_TEXT)
def test_whatever_langchains_ascii_detector_finds_is_found(text: str):
    ours = [(m["start"], m["end"]) for m in detect_email(text)]
    for theirs in langchain_detect_email(text):
        assert any(s <= theirs["start"] and theirs["end"] <= e for s, e in ours), (theirs, ours)


@pytest.mark.parametrize(
    "text",
    [
        "maria.garcia@acme.example",
        "Reach Jane at jane.doe@example.com or bob+crm@contoso.co.uk.",
        '{"email": "first_last@acme.example", "id": "con-0001"}',
        "<maria@acme.example>, (kevin@acme.example)",
        "name@xn--bcher-kva.example",
    ],
)
def test_ascii_addresses_are_found_exactly_as_langchain_finds_them(text: str):
    assert detect_email(text) == langchain_detect_email(text)


# --- examples ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("name@bücher.example", REDACTED),
        ("josé.garcía@acme.example", REDACTED),
        ("उपयोगकर्ता@उदाहरण.भारत", REDACTED),  # vowel signs are combining marks
        ("x@shop.xn--p1ai and y@SHOP.XN--P1AI", f"{REDACTED} and {REDACTED}"),  # the whole punycode TLD
        ("пользователь@пример.рф.", f"{REDACTED}."),
        ("用户@例子.中国。谢谢", f"{REDACTED}。谢谢"),  # a full stop after the address is not a label
        ("用户@例子。中国", REDACTED),  # but an ideographic dot between labels is one
        ("ｍａｒｉａ＠ｓｈｏｐ．ｅｘａｍｐｌｅ", REDACTED),
        ("'o'brien@acme.example'", f"'{REDACTED}'"),
        ('He said "hi" to "josé garcía"@bücher.example.', f'He said "hi" to {REDACTED}.'),
        (
            '{"handle":"@acme.example", "note": "ok" @acme.example}',
            '{"handle":"@acme.example", "note": "ok" @acme.example}',
        ),
        ("mailto:josé@bücher.example?subject=Hi", f"mailto:{REDACTED}?subject=Hi"),
        ("?email=jos%C3%A9%40b%C3%BCcher.example&view=1", f"?email={REDACTED}&view=1"),
        ("https://maria%40acme.example@crm.example/inbox", f"https://{REDACTED}@crm.example/inbox"),
        ('"email": "jos\\u00e9@b\\u00fccher.example"', f'"email": "{REDACTED}"'),
        ("Email:\\nmaria@acme.example", f"Email:\\n{REDACTED}"),  # a JSON newline is not the local part
        ("maria&#64;acme.example or maria&commat;b&#xFC;cher.example", f"{REDACTED} or {REDACTED}"),
        ("100%25 sure, ping d\\u00e9j\\u00e0 &amp; co", "100%25 sure, ping d\\u00e9j\\u00e0 &amp; co"),
    ],
)
def test_internationalised_and_escaped_addresses_are_redacted_and_nothing_around_them(
    text: str, expected: str
):
    assert redact_pii(text) == expected


def test_an_escaped_match_covers_exactly_the_characters_that_wrote_the_address():
    text = "see ?email=jos%C3%A9%40b%C3%BCcher.example&x=1"
    [match] = detect_email(text)
    assert match["value"] == "jos%C3%A9%40b%C3%BCcher.example"
    assert text[match["start"] : match["end"]] == match["value"]


@pytest.mark.parametrize("text", NOT_ADDRESSES)
def test_mentions_decorators_versions_paths_and_products_are_not_addresses(text: str):
    assert detect_email(text) == []
    assert langchain_detect_email(text) == []  # negatives before the change, and still


_HANDLE = st.text(_LETTER_MARK_DIGIT, min_size=1, max_size=10)


@PROPERTY
@given(
    handle=_HANDLE,
    second=_HANDLE,
    package=st.one_of(_HANDLE, st.text(string.ascii_lowercase + "-/", min_size=1, max_size=10)),
    version=st.lists(st.integers(0, 99), min_size=1, max_size=4),
)
def test_mentions_decorators_and_versions_in_any_script_stay(
    handle: str, second: str, package: str, version: list[int]
):
    numbers = ".".join(map(str, version))
    for text in (
        f"thanks @{handle} and @{handle}.{second}",
        f"@{handle}.{second}(x=1)\ndef f(): ...",
        f"npm i {package}@{numbers}",
        f"{package}@{numbers}-rc.{version[0]}",
    ):
        assert detect_email(text) == [], text


def test_every_domain_the_suites_use_is_a_real_idn():
    assert all(punycode(d).isascii() for d in UNICODE_DOMAINS)
