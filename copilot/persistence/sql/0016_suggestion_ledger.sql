-- The suggestion ledger (copilot/briefs/ledger.py): each change a brief or the digest suggested
-- to a rep, per record version as read, and whether the rep declined or accepted it. A
-- suggestion declined at a version is not made again while the record keeps that version;
-- once the record changes (its version moves on) it may be made again, as a new row.
CREATE TABLE suggestion_ledger (
    id              bigserial PRIMARY KEY,
    tenant_id       text NOT NULL,
    rep_aad_id      text NOT NULL,
    kind            text NOT NULL,
    record_id       text NOT NULL,
    record_version  integer NOT NULL,
    state           text NOT NULL DEFAULT 'made',
    made_at         timestamptz NOT NULL DEFAULT now(),
    decided_at      timestamptz,
    CONSTRAINT suggestion_state CHECK (state IN ('made', 'declined', 'accepted')),
    CONSTRAINT suggestion_once_per_version UNIQUE (tenant_id, rep_aad_id, kind, record_id, record_version)
);
CREATE INDEX suggestion_ledger_record_idx ON suggestion_ledger (tenant_id, rep_aad_id, record_id);

GRANT SELECT, INSERT, UPDATE, DELETE ON suggestion_ledger TO copilot_app;
GRANT USAGE, SELECT ON SEQUENCE suggestion_ledger_id_seq TO copilot_app;
