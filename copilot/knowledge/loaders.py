"""Documents into sections: LangChain document loaders and text splitters, pure apart from
reading the file.

Each format has a :class:`~langchain_core.document_loaders.BaseLoader` that yields one
LangChain ``Document`` per heading-delimited section (Markdown, HTML, DOCX) or per page
(PDF), with the heading path as metadata (``headings``, ``section``); :func:`split`
then cuts long sections with LangChain's recursive splitter, keeping that metadata.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path
from typing import Literal, assert_never

from langchain_core.document_loaders import BaseLoader
from langchain_core.documents import Document
from langchain_text_splitters import (
    HTMLHeaderTextSplitter,
    MarkdownHeaderTextSplitter,
    RecursiveCharacterTextSplitter,
)

from copilot.errors import InvalidInput

Format = Literal["markdown", "html", "pdf", "docx"]

SUFFIXES: dict[str, Format] = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}

CHUNK_CHARS = 1200
"""Longest chunk: a section or two of a playbook, small enough for several in one prompt."""
CHUNK_OVERLAP = 150

_LEVELS = [("#", "h1"), ("##", "h2"), ("###", "h3"), ("####", "h4")]
_HTML_LEVELS = [("h1", "h1"), ("h2", "h2"), ("h3", "h3"), ("h4", "h4")]


def format_of(name: str) -> Format:
    """The format a file name (or URL path) ends in; a clear error for anything else."""
    suffix = Path(name.split("?", 1)[0]).suffix.lower()
    try:
        return SUFFIXES[suffix]
    except KeyError:
        raise InvalidInput(
            f"cannot ingest {name[:120]!r}: supported formats are {', '.join(sorted(SUFFIXES))}"
        ) from None


def _with_headings(doc: Document) -> Document:
    headings = [str(doc.metadata[key]) for _, key in _LEVELS if doc.metadata.get(key)]
    return Document(
        page_content=doc.page_content,
        metadata={"headings": headings, "section": " › ".join(headings[1:] or headings)},
    )


class MarkdownLoader(BaseLoader):
    """A Markdown file, one document per heading section (headings as metadata)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lazy_load(self) -> Iterator[Document]:
        text = self.path.read_text(encoding="utf-8")
        splitter = MarkdownHeaderTextSplitter(_LEVELS, strip_headers=True)
        for doc in splitter.split_text(text):
            if doc.page_content.strip():
                yield _with_headings(doc)


class HtmlLoader(BaseLoader):
    """An HTML page, one document per heading section."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lazy_load(self) -> Iterator[Document]:
        html = self.path.read_text(encoding="utf-8", errors="replace")
        current: list[str] | None = None
        parts: list[str] = []
        # The splitter yields one element per block; blocks under the same headings join.
        for doc in HTMLHeaderTextSplitter(_HTML_LEVELS).split_text(html):
            headings = [str(doc.metadata[k]) for _, k in _HTML_LEVELS if doc.metadata.get(k)]
            if doc.page_content.strip() in headings:
                continue  # the heading's own element: it is metadata, not body text
            if current is not None and headings != current and parts:
                yield _section(current, parts)
                parts = []
            current = headings
            parts.append(doc.page_content)
        if current is not None and parts:
            yield _section(current, parts)


def _section(headings: list[str], parts: list[str]) -> Document:
    return Document(
        page_content="\n".join(parts),
        metadata={"headings": headings, "section": " › ".join(headings[1:] or headings)},
    )


class PdfLoader(BaseLoader):
    """A PDF, one document per page (PDF text carries no reliable heading structure)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lazy_load(self) -> Iterator[Document]:
        from pypdf import PdfReader
        from pypdf.errors import PdfReadError

        try:
            reader = PdfReader(self.path)
            pages = [page.extract_text() or "" for page in reader.pages]
        except (PdfReadError, ValueError, KeyError) as exc:
            raise InvalidInput(f"{self.path.name} is not a readable PDF: {exc}") from exc
        for number, text in enumerate(pages, start=1):
            if text.strip():
                yield Document(page_content=text, metadata={"headings": [], "section": f"Page {number}"})


_HEADING_STYLE = re.compile(r"^(?:Heading|Title)\s*(\d?)$", re.IGNORECASE)


class DocxLoader(BaseLoader):
    """A Word document, one document per heading section (its Heading styles)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def lazy_load(self) -> Iterator[Document]:
        import docx
        from docx.opc.exceptions import PackageNotFoundError

        try:
            paragraphs = docx.Document(str(self.path)).paragraphs
        except (PackageNotFoundError, ValueError, KeyError) as exc:
            raise InvalidInput(f"{self.path.name} is not a readable DOCX: {exc}") from exc
        lines: list[str] = []
        for paragraph in paragraphs:
            text = paragraph.text.strip()
            if not text:
                continue
            match = _HEADING_STYLE.match(paragraph.style.name if paragraph.style is not None else "")
            if match:
                level = int(match.group(1) or 1)
                lines.append(f"{'#' * min(level, 4)} {text}")
            else:
                lines.append(text)
            lines.append("")
        # Headings become Markdown headings: one splitter for both formats.
        splitter = MarkdownHeaderTextSplitter(_LEVELS, strip_headers=True)
        for doc in splitter.split_text("\n".join(lines)):
            if doc.page_content.strip():
                yield _with_headings(doc)


def loader_for(path: Path, fmt: Format) -> BaseLoader:
    """The document loader for ``fmt``."""
    if fmt == "markdown":
        return MarkdownLoader(path)
    if fmt == "html":
        return HtmlLoader(path)
    if fmt == "pdf":
        return PdfLoader(path)
    if fmt == "docx":
        return DocxLoader(path)
    assert_never(fmt)


def split(sections: list[Document]) -> list[Document]:
    """Long sections cut into chunks of at most :data:`CHUNK_CHARS`, each keeping its headings."""
    splitter = RecursiveCharacterTextSplitter(chunk_size=CHUNK_CHARS, chunk_overlap=CHUNK_OVERLAP)
    return splitter.split_documents(sections)


def title_of(sections: list[Document], fallback: str) -> str:
    """The document's title: its first top-level heading, else ``fallback`` (the file name)."""
    for doc in sections:
        headings = doc.metadata.get("headings") or []
        if headings:
            return str(headings[0])
    return fallback
