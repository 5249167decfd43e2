"""The optional embedding model behind hybrid search (``COPILOT_EMBEDDINGS``)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass

from langchain_core.embeddings import Embeddings

from copilot.errors import ConfigurationError


@dataclass(frozen=True)
class EmbeddingModel:
    """A LangChain ``Embeddings`` and the name its vectors are recorded under."""

    name: str
    embeddings: Embeddings

    async def embed_query(self, text: str) -> list[float]:
        return list(await self.embeddings.aembed_query(text))

    async def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return [list(v) for v in await self.embeddings.aembed_documents(list(texts))]


def from_setting(spec: str | None) -> EmbeddingModel | None:
    """``provider:model`` (e.g. ``azure_openai:text-embedding-3-small``) through
    ``init_embeddings``; unset = none (full-text search only)."""
    if not spec:
        return None
    from langchain.embeddings import init_embeddings

    try:
        return EmbeddingModel(spec, init_embeddings(spec))
    except (ImportError, ValueError) as exc:
        raise ConfigurationError(f"COPILOT_EMBEDDINGS={spec!r} cannot be loaded: {exc}") from exc


def hnsw_index_name(model: str) -> str:
    """The name of one model's partial HNSW index (one per model, so models never mix)."""
    return f"knowledge_chunks_hnsw_{hashlib.sha256(model.encode()).hexdigest()[:12]}"


def vector_literal(vector: Sequence[float]) -> str:
    """pgvector's text form, ``[0.1,0.2,...]``."""
    return "[" + ",".join(repr(float(v)) for v in vector) + "]"
