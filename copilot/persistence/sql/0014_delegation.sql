-- Approval delegation: a rep lets a named colleague of the same tenant decide the rep's
-- pending proposals for a time window, and can revoke it (copilot/delegation.py). The
-- decision check (copilot/persistence/threads.py authorize, purpose "decide") admits a
-- delegate only while a row here is live: now() within [starts_at, ends_at), not revoked,
-- same tenant as the thread. A delegation never opens the owner's conversation itself.
CREATE TABLE approval_delegations (
    id               bigserial PRIMARY KEY,
    tenant_id        text NOT NULL,
    owner_aad_id     text NOT NULL,
    owner_name       text NOT NULL DEFAULT '',
    delegate_aad_id  text NOT NULL,
    delegate_name    text NOT NULL DEFAULT '',
    starts_at        timestamptz NOT NULL DEFAULT now(),
    ends_at          timestamptz NOT NULL,
    revoked_at       timestamptz,
    created_at       timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT delegation_window CHECK (ends_at > starts_at),
    CONSTRAINT delegation_to_someone_else CHECK (owner_aad_id <> delegate_aad_id)
);
CREATE INDEX approval_delegations_delegate_idx
    ON approval_delegations (tenant_id, delegate_aad_id, ends_at) WHERE revoked_at IS NULL;
CREATE INDEX approval_delegations_owner_idx
    ON approval_delegations (tenant_id, owner_aad_id, ends_at) WHERE revoked_at IS NULL;

GRANT SELECT, INSERT, UPDATE, DELETE ON approval_delegations TO copilot_app;
GRANT USAGE, SELECT ON SEQUENCE approval_delegations_id_seq TO copilot_app;

-- Who decided a write, beside whose write it is (rep_aad_id, the thread's owner): the
-- delegate when a delegation was used, else the rep. Covered by the row's HMAC whenever
-- it is set; rows written before this migration hash exactly as before.
ALTER TABLE audit_log ADD COLUMN approver_aad_id text;
