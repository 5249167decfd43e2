-- The copilot's own tables: exactly-once writes (invariant 3), the append-only audit log
-- (invariant 6), rejections for analytics, and the least-privilege role the app runs as.

-- Roles are cluster-wide while migrations are per database: several databases on one
-- server (tests, staging next to prod) each run this, possibly at the same moment, so
-- creating the role must tolerate "already exists" from a concurrent creator too.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'copilot_app') THEN
        BEGIN
            CREATE ROLE copilot_app NOLOGIN;
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;  -- another database's migrator created it first
        END;
    END IF;
    -- The migrating user must be able to `SET ROLE copilot_app` (superusers always can;
    -- a plain owner role that runs both migrations and the app needs the membership).
    IF NOT pg_has_role(current_user, 'copilot_app', 'MEMBER') THEN
        EXECUTE format('GRANT copilot_app TO %I', current_user);
    END IF;
END
$$;

-- Invariant 3: one row per write, keyed by thread_id:tool_call_id. A claimer holds the
-- row lock while the CRM write runs; 'done' rows carry the result a repeat returns.
CREATE TABLE idempotency_keys (
    key            text PRIMARY KEY,
    tenant_id      text NOT NULL,
    rep_aad_id     text NOT NULL,
    thread_id      text NOT NULL,
    tool_call_id   text NOT NULL,
    tool           text NOT NULL,
    args_hash      text NOT NULL,
    status         text NOT NULL CHECK (status IN ('pending', 'done')),
    result         jsonb,
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT idempotency_key_format CHECK (key = thread_id || ':' || tool_call_id),
    CONSTRAINT idempotency_done_has_result CHECK (status = 'pending' OR result IS NOT NULL)
);
CREATE INDEX idempotency_keys_thread_idx ON idempotency_keys (thread_id);

-- Invariant 6: one row per executed write, hash-chained (prev_hash -> row_hash) in id
-- order so `python -m copilot audit verify` detects altered, deleted or inserted rows.
CREATE TABLE audit_log (
    id                   bigserial PRIMARY KEY,
    tenant_id            text NOT NULL,
    rep_aad_id           text NOT NULL,
    thread_id            text NOT NULL,
    tool_call_id         text NOT NULL,
    tool                 text NOT NULL,
    target_record_id     text,
    record_version_read  integer,
    original_args        jsonb NOT NULL,
    edited_args          jsonb,
    decision             text NOT NULL CHECK (decision IN ('approve', 'edit')),
    crm_response         jsonb NOT NULL,
    proposed_at          timestamptz,
    decided_at           timestamptz NOT NULL,
    executed_at          timestamptz NOT NULL,
    trace_url            text,
    prev_hash            text NOT NULL,
    row_hash             text NOT NULL UNIQUE,
    CONSTRAINT audit_one_row_per_write UNIQUE (thread_id, tool_call_id)
);
CREATE INDEX audit_log_tenant_rep_idx ON audit_log (tenant_id, rep_aad_id, executed_at);

-- Defence in depth: even the table owner (who keeps UPDATE/DELETE by ownership) is
-- stopped by these triggers; disabling them needs ALTER TABLE, which leaves the hash
-- chain as the last line that still detects the change.
CREATE FUNCTION audit_log_is_append_only() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % is not allowed', TG_OP
        USING HINT = 'audit rows are evidence; record a new row instead of changing one';
END
$$;

CREATE TRIGGER audit_log_no_update_or_delete
    BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION audit_log_is_append_only();

CREATE TRIGGER audit_log_no_truncate
    BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION audit_log_is_append_only();

-- Rejected proposals, for analytics only: they are not writes and never reach audit_log.
CREATE TABLE rejections (
    id             bigserial PRIMARY KEY,
    tenant_id      text NOT NULL,
    rep_aad_id     text NOT NULL,
    thread_id      text NOT NULL,
    tool_call_id   text NOT NULL,
    tool           text NOT NULL,
    args           jsonb NOT NULL,
    reason         text NOT NULL,
    rejected_at    timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT rejection_once_per_tool_call UNIQUE (thread_id, tool_call_id)
);

-- Least privilege for the role the application runs as (`SET ROLE copilot_app`).
GRANT SELECT, INSERT, UPDATE, DELETE ON threads, thread_delegations, idempotency_keys, rejections
    TO copilot_app;
GRANT USAGE, SELECT ON SEQUENCE rejections_id_seq TO copilot_app;
GRANT SELECT ON schema_migrations TO copilot_app;

REVOKE ALL ON audit_log FROM PUBLIC;
GRANT SELECT, INSERT ON audit_log TO copilot_app;
REVOKE UPDATE, DELETE, TRUNCATE ON audit_log FROM PUBLIC, copilot_app;
GRANT USAGE ON SEQUENCE audit_log_id_seq TO copilot_app;
