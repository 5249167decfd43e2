-- The rep's preferences for what the copilot posts on its own, the daily digest's claims and
-- the digest's feedback (issue 22).
--
-- brief_settings gains the rep's own settings (said in their 1:1 chat): lead_minutes (NULL =
-- the admin's COPILOT_BRIEF_LEAD_MINUTES), digest_enabled (off until "digest on"),
-- digest_time (the rep's local time, 07:30 until "digest at …") and time_zone (the IANA zone
-- Teams reports on each turn; NULL until one is seen).
-- digest_claims: one row per (tenant, rep, local day) a digest was claimed for, claimed with
-- INSERT … ON CONFLICT DO NOTHING as brief_claims are. A claim with no activity_id older than
-- the lease (bot/brief_store.py CLAIM_LEASE) may be taken again: its instance died mid-post.
-- digest_feedback: "Not useful" on a digest (record_id ''), "Snooze" on one of its items
-- (record_id: the item's record, left out of the rep's digests before snoozed_until).

ALTER TABLE brief_settings
    ADD COLUMN lead_minutes   integer CHECK (lead_minutes BETWEEN 1 AND 10080),
    ADD COLUMN digest_enabled boolean NOT NULL DEFAULT false,
    ADD COLUMN digest_time    time NOT NULL DEFAULT '07:30',
    ADD COLUMN time_zone      text;

CREATE TABLE digest_claims (
    tenant_id      text NOT NULL,
    aad_object_id  text NOT NULL,
    day            date NOT NULL,
    claimed_at     timestamptz NOT NULL DEFAULT now(),
    activity_id    text,
    PRIMARY KEY (tenant_id, aad_object_id, day)
);

CREATE TABLE digest_feedback (
    id             bigserial PRIMARY KEY,
    tenant_id      text NOT NULL,
    aad_object_id  text NOT NULL,
    day            date NOT NULL,
    kind           text NOT NULL CHECK (kind IN ('not_useful', 'snooze')),
    record_id      text NOT NULL DEFAULT '',
    snoozed_until  date,
    received_at    timestamptz NOT NULL DEFAULT now(),
    UNIQUE (tenant_id, aad_object_id, day, kind, record_id)
);

CREATE INDEX digest_feedback_snoozes ON digest_feedback (tenant_id, aad_object_id, snoozed_until)
    WHERE kind = 'snooze';

GRANT SELECT, INSERT, UPDATE, DELETE ON digest_claims, digest_feedback TO copilot_app;
GRANT USAGE ON SEQUENCE digest_feedback_id_seq TO copilot_app;
