-- The rep's last catch-up (copilot/insight/catchup.py): when they last asked what changed in
-- their whole book, so the next catch-up starts there. One row per rep; it only moves forward.
CREATE TABLE catchup_marks (
    tenant_id   text NOT NULL,
    rep_aad_id  text NOT NULL,
    caught_up_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, rep_aad_id)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON catchup_marks TO copilot_app;
