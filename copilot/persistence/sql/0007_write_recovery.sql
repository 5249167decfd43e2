-- Crash recovery of writes (invariant 3): a write reaches a durable 'in_flight' state,
-- with the plan it was approved under, before the CRM / mailbox / store is called. A
-- crash after that leaves the evidence; the next attempt asks the backend by key and
-- finishes (audit row included) instead of re-checking a version its own write bumped.
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_keys_status_check;
ALTER TABLE idempotency_keys DROP CONSTRAINT idempotency_done_has_result;
ALTER TABLE idempotency_keys
    ADD CONSTRAINT idempotency_keys_status_check CHECK (status IN ('pending', 'in_flight', 'done')),
    ADD CONSTRAINT idempotency_done_has_result CHECK (status <> 'done' OR result IS NOT NULL),
    ADD COLUMN plan jsonb,
    ADD COLUMN attempts integer NOT NULL DEFAULT 0,
    ADD CONSTRAINT idempotency_in_flight_has_plan CHECK (status <> 'in_flight' OR plan IS NOT NULL);
CREATE INDEX idempotency_keys_in_flight_idx ON idempotency_keys (thread_id) WHERE status = 'in_flight';
