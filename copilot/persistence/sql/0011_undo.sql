-- Compensating undo (`undo_write`): an undo's audit row names the row of the write it
-- reverses. The link is covered by the row's HMAC (it is part of the row's canonical
-- JSON whenever it is set; rows without it hash exactly as before this migration).

ALTER TABLE audit_log ADD COLUMN undoes_audit_id bigint REFERENCES audit_log (id);

-- A write is undone at most once, whatever races the proposals that ask for it.
CREATE UNIQUE INDEX audit_log_undone_once ON audit_log (undoes_audit_id) WHERE undoes_audit_id IS NOT NULL;
