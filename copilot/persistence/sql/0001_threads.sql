-- Invariant 7: every conversation thread belongs to a tenant and a rep, and a thread
-- may be opened by someone else only through an explicit delegation row.
CREATE TABLE threads (
    thread_id        text PRIMARY KEY,
    tenant_id        text NOT NULL,
    owner_aad_id     text NOT NULL,
    created_at       timestamptz NOT NULL DEFAULT now(),
    last_active_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT thread_id_is_random CHECK (length(thread_id) >= 22)
);
CREATE INDEX threads_owner_idx ON threads (tenant_id, owner_aad_id, last_active_at DESC);
CREATE INDEX threads_last_active_idx ON threads (last_active_at);

CREATE TABLE thread_delegations (
    thread_id        text NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    tenant_id        text NOT NULL,
    delegate_aad_id  text NOT NULL,
    granted_by       text NOT NULL,
    granted_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, delegate_aad_id)
);
