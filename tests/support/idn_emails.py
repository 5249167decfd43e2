"""Internationalised email addresses, and the places reps and CRMs write them, for the PII tests.

One vocabulary for the adversarial suite (seeded ``random``) and the property tests
(hypothesis): local parts in many scripts, IDN domains in Unicode and in punycode (made
with the ``idna`` package, UTS #46, as mail software makes them), full-width forms typed
with a Japanese or Chinese IME, and the contexts an address sits in (sentences in several
languages, quotes, brackets, display names, ``mailto:`` links, query strings plain and
percent-encoded, URL userinfo, CRM JSON with and without ``\\u`` escapes). Every context
keeps the address apart from its neighbours, so the expected redaction is exact.
"""

from __future__ import annotations

import json
import random
import sqlite3
from collections.abc import Iterator
from contextlib import closing, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import idna

REDACTED = "[REDACTED_EMAIL]"

# Local parts people really have, by script (Latin with diacritics, Greek, Cyrillic,
# Armenian, Georgian, Hebrew, Arabic, Devanagari, Bengali, Tamil, Thai, Han, Japanese
# kana, Hangul), ASCII ones with the characters LangChain's pattern already allowed, and
# quoted ones.
LOCAL_PARTS = (
    "josé.garcía",
    "müller",
    "françois.dupont",
    "łukasz.nowak",
    "øyvind",
    "şükrü_yılmaz",
    "anaïs+crm",
    "đorđe",
    "γιώργος.παπαδόπουλος",
    "δοκιμή",
    "иван.петров",
    "пользователь",
    "олена",
    "արմեն",
    "გიორგი",
    "דוד.כהן",
    "משה",
    "محمد",
    "أحمد.علي",
    "उपयोगकर्ता",
    "राम.शर्मा",
    "ব্যবহারকারী",
    "பயனர்",
    "ผู้ใช้",
    "สมชาย",
    "用户",
    "张伟",
    "たなか",
    "テスト.ユーザー",
    "山田",
    "사용자",
    "김민준",
    "maria.garcia",
    "o'brien",
    "first_last",
    "maria+renewal",
    '"josé garcía"',  # RFC 5322 quoted local parts
    '"maria garcia"',
)

# Domains that IDNA 2008 (UTS #46) accepts, so each has a punycode form too.
UNICODE_DOMAINS = (
    "bücher.example",
    "müller-gmbh.de",
    "straße.de",
    "café.fr",
    "mail.bücher.example",
    "örnek.com.tr",
    "δοκιμή.ελ",
    "пример.рф",
    "почта.москва",
    "例子.中国",
    "例え.テスト",
    "みんな.jp",
    "도메인.한국",
    "उदाहरण.भारत",
    "அஞ்சல்.இந்தியா",
    "ไทย.ไทย",
    "مثال.مصر",
    "דוגמה.ישראל",
)
ASCII_DOMAINS = ("acme.example", "contoso.co.uk", "shop.example.com")


def punycode(domain: str) -> str:
    """The domain's ASCII (punycode) form, as mail software writes it on the wire."""
    return idna.encode(domain, uts46=True).decode("ascii")


for _domain in UNICODE_DOMAINS:  # a typo here would test nothing real
    punycode(_domain)


def full_width(text: str) -> str:
    """``text`` as a Japanese/Chinese IME types it in full-width mode (``ｍａｒｉａ＠ｅｘａｍｐｌｅ．ｃｏｍ``)."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def domain_form(rng: random.Random) -> str:
    """One domain: Unicode, punycode (lower or upper case), mixed, or with an ideographic dot."""
    unicode_domain = rng.choice(UNICODE_DOMAINS)
    roll = rng.random()
    if roll < 0.35:
        return unicode_domain
    if roll < 0.6:
        return punycode(unicode_domain)
    if roll < 0.67:
        return punycode(unicode_domain).upper()
    if roll < 0.75:  # the labels in Unicode, the TLD in punycode ("пример.xn--p1ai")
        *labels, tld = unicode_domain.split(".")
        return ".".join([*labels, punycode(tld)])
    if roll < 0.82:  # UTS #46 reads the ideographic full stop as a dot
        return unicode_domain.replace(".", "。")
    if roll < 0.9:
        return unicode_domain.title() if unicode_domain.isascii() else unicode_domain.upper()
    return rng.choice(ASCII_DOMAINS)


def address(rng: random.Random) -> str:
    """One internationalised address (a Unicode local part or an IDN domain, often both)."""
    local = rng.choice(LOCAL_PARTS)
    if rng.random() < 0.08:
        return full_width(f"{rng.choice(('maria.garcia', 'tanaka', 'info'))}@{rng.choice(ASCII_DOMAINS)}")
    domain = domain_form(rng)
    if local.isascii() and domain.isascii() and "xn--" not in domain.lower():
        domain = rng.choice(UNICODE_DOMAINS)  # always something internationalised
    return f"{local}@{domain}"


# --- where an address is written ---------------------------------------------------------------

# Each sentence separates the address from its neighbours with a space or punctuation,
# as each language writes it (Korean and Japanese particles come after a space here: glued
# to the address they read as part of its last label, see docs/ARCHITECTURE.md invariant 9).
SENTENCES = (
    "Please email {e} about the renewal.",
    "Bitte schreiben Sie an {e}, danke.",
    "Écrivez à {e} avant vendredi.",
    "Escríbele a {e}; es la directora.",
    "Mande um e-mail para {e} hoje.",
    "Lütfen {e} adresine yazın.",
    "Напишите на {e}, пожалуйста.",
    "Στείλτε email στο {e} σήμερα.",
    "راسلني على {e} من فضلك.",
    "כתבו אל {e} בבקשה.",
    "कृपया {e} पर ईमेल करें।",
    "กรุณาติดต่อ {e} ครับ",
    "请发邮件到 {e}，谢谢。",
    "メールは {e} までお願いします。",
    "이메일: {e} 입니다",
    "{e}",
    "Email: {e}\nPhone: ask first",
)

WRAPPERS = (
    "{e}",
    '"{e}"',
    "'{e}'",
    "«{e}»",
    "„{e}“",
    "「{e}」",
    "『{e}』",
    "<{e}>",
    "({e})",
    "[{e}]",
    "（{e}）",
    "`{e}`",
    "María García <{e}>",
    '"García, María" <{e}>',
    "mailto:{e}",
    "mailto:{e}?subject=Renewal",
    '<a href="mailto:{e}">{e}</a>',
    "[{e}](mailto:{e})",
    "https://crm.example/contacts?email={e}&view=full",
    "https://crm.example/contacts?email={pe}&view=full",
    "https://crm.example/contacts?view=full&owner={pe}",
    "https://{pe}@crm.example/inbox",
    "imaps://{e}/INBOX",
)


@dataclass(frozen=True)
class Written:
    """An address written somewhere, and what the model must see instead."""

    text: str
    expected: str


def percent_encoded(email: str) -> str:
    """The address as a URL query value or userinfo carries it (``@`` is ``%40``)."""
    return quote(email, safe="")


def in_context(email: str, sentence: str, wrapper: str) -> Written:
    """``email`` in ``wrapper`` in ``sentence``, with every occurrence the expected redaction."""

    def fill(value: str, encoded: str) -> str:
        return sentence.format(e=wrapper.format(e=value, pe=encoded))

    return Written(fill(email, percent_encoded(email)), fill(REDACTED, REDACTED))


def written(rng: random.Random, email: str) -> Written:
    """``email`` in a random sentence and wrapper."""
    return in_context(email, rng.choice(SENTENCES), rng.choice(WRAPPERS))


def crm_json(rng: random.Random, email: str) -> Written:
    """A CRM contact as JSON text, with non-ASCII escaped (``\\u00e9``) or kept, as servers vary."""
    contact = {"id": f"con-{rng.randint(1, 9999):04d}", "name": "María García", "email": email, "version": 3}
    ascii_only = rng.random() < 0.5
    return Written(
        json.dumps({"items": [contact]}, ensure_ascii=ascii_only),
        json.dumps({"items": [{**contact, "email": REDACTED}]}, ensure_ascii=ascii_only),
    )


# --- what has an at-sign and is not an address ------------------------------------------------

NOT_ADDRESSES = (
    "@alex can you check the Acme renewal?",
    "thanks @María and @田中 for the notes",
    "@Jürgen.Müller please review opp-acme-renewal",
    "cc @иван.петров @محمد @राम @사용자",
    "@pytest.fixture\ndef contacts(): ...",
    "@app.route('/contacts')",
    "@dataclass(frozen=True)\nclass Größe: ...",
    "@überprüfe(größe=3)",
    "@Override public void run()",
    "pip install langchain==1.5.2; npm i lodash@4.17.21",
    "@types/node@20.11.5 and react@18.2.0-rc.1",
    "npm i パッケージ@1.2.3",
    "python@sha256:4f5e6d7c8b9a",
    "ssh git@github and root@localhost",
    "/Users/josé/Documents/@Entwürfe/plan v2.10.4.txt",
    "C:\\Users\\Jürgen\\@Archiv\\Q3 2026.xlsx",
    "meet @ 10:30 in Zürich",
    "3 seats @ €50 each",
    "Größe @ Standard",
    "y = W@x.T + b",
    "(@_@) version 2.10.4",
    "see #opp-0012 @ 2026-12-15",
)


# --- in the sandbox CRM --------------------------------------------------------------------------


@contextmanager
def stored_contact_emails(db_path: Path, emails: dict[str, str]) -> Iterator[None]:
    """The sandbox CRM's contacts (id -> email) with these addresses, restored afterwards.

    The sandbox reads its SQLite database on every request, so its MCP tools serve them at once.
    """
    with closing(sqlite3.connect(db_path)) as conn, conn:
        before = {
            cid: conn.execute("SELECT email FROM contacts WHERE id = ?", (cid,)).fetchone()[0]
            for cid in emails
        }
        conn.executemany(
            "UPDATE contacts SET email = ? WHERE id = ?", [(e, cid) for cid, e in emails.items()]
        )
    try:
        yield
    finally:
        with closing(sqlite3.connect(db_path)) as conn, conn:
            conn.executemany(
                "UPDATE contacts SET email = ? WHERE id = ?", [(e, cid) for cid, e in before.items()]
            )
