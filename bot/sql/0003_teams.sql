-- The Teams side: which conversation runs which thread, where each approval card lives
-- (to update it in place), the conversation reference for proactive replies, and the
-- reps' delegated tokens (encrypted at rest; never in model context).

CREATE TABLE conversations (
    conversation_id   text NOT NULL,
    tenant_id         text NOT NULL,
    aad_object_id     text NOT NULL,
    thread_id         text NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    reference         jsonb NOT NULL,
    updated_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, tenant_id, aad_object_id)
);

CREATE TABLE approval_cards (
    thread_id      text NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    tool_call_id   text NOT NULL,
    conversation_id text NOT NULL,
    activity_id    text NOT NULL,
    created_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, tool_call_id)
);

CREATE TABLE user_tokens (
    tenant_id      text NOT NULL,
    aad_object_id  text NOT NULL,
    ciphertext     bytea NOT NULL,
    expires_at     timestamptz NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, aad_object_id)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON conversations, approval_cards, user_tokens TO copilot_app;
