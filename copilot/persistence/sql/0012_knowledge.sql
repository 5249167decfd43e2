-- Knowledge retrieval: playbooks, product sheets and pricing guidance, split into chunks.
-- Access control lives on every chunk (denormalised from its document) so that search
-- matches it in the WHERE clause of the same query that ranks: a chunk a rep may not
-- read is never selected, let alone handed to the model.
-- An ACL list left empty means "no restriction on that dimension"; a non-empty one
-- must overlap the rep's groups / roles / territories. The tenant always has to match.
CREATE EXTENSION IF NOT EXISTS vector;

CREATE TABLE knowledge_documents (
    tenant_id        text NOT NULL,
    document_id      text NOT NULL,
    title            text NOT NULL,
    source_url       text NOT NULL,
    content_hash     text NOT NULL,
    acl_groups       text[] NOT NULL DEFAULT '{}',
    acl_roles        text[] NOT NULL DEFAULT '{}',
    acl_territories  text[] NOT NULL DEFAULT '{}',
    chunk_count      integer NOT NULL,
    ingested_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, document_id)
);

CREATE TABLE knowledge_chunks (
    chunk_id         text PRIMARY KEY,
    tenant_id        text NOT NULL,
    document_id      text NOT NULL,
    ordinal          integer NOT NULL,
    title            text NOT NULL,
    section          text NOT NULL DEFAULT '',
    headings         text[] NOT NULL DEFAULT '{}',
    source_url       text NOT NULL,
    content          text NOT NULL,
    content_hash     text NOT NULL,
    acl_groups       text[] NOT NULL DEFAULT '{}',
    acl_roles        text[] NOT NULL DEFAULT '{}',
    acl_territories  text[] NOT NULL DEFAULT '{}',
    -- Title and section weigh more than body text, so "negotiation playbook" finds the
    -- negotiation section before a passing mention elsewhere.
    tsv              tsvector GENERATED ALWAYS AS (
                         setweight(to_tsvector('english', title), 'A')
                         || setweight(to_tsvector('english', section), 'B')
                         || setweight(to_tsvector('english', content), 'C')
                     ) STORED,
    -- Set only when an embedding model is configured. The model is recorded with the
    -- vector: search compares only vectors of the configured model, and changing the
    -- model re-embeds (see copilot/knowledge/embedding.py). Each model's HNSW index is a
    -- partial expression index on (embedding::vector(dims)) WHERE embedding_model = it,
    -- created when that model first embeds.
    embedding        vector,
    embedding_model  text,
    FOREIGN KEY (tenant_id, document_id)
        REFERENCES knowledge_documents (tenant_id, document_id) ON DELETE CASCADE,
    CHECK ((embedding IS NULL) = (embedding_model IS NULL))
);
CREATE INDEX knowledge_chunks_tsv ON knowledge_chunks USING gin (tsv);
CREATE INDEX knowledge_chunks_document ON knowledge_chunks (tenant_id, document_id);

-- The application only searches; ingestion is an administrator's command.
GRANT SELECT ON knowledge_documents, knowledge_chunks TO copilot_app;
