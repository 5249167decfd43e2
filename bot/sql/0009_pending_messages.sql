-- A rep's message that arrived while they had no live sign-in (a stored sign-in expires
-- about hourly): kept while Teams signs them in again, then answered in the token
-- exchange, so they need not ask again. One per rep and conversation (the latest).
CREATE TABLE pending_messages (
    tenant_id        text NOT NULL,
    aad_object_id    text NOT NULL,
    conversation_id  text NOT NULL,
    text             text NOT NULL,
    activity_id      text,
    received_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, aad_object_id, conversation_id)
);
GRANT SELECT, INSERT, UPDATE, DELETE ON pending_messages TO copilot_app;
