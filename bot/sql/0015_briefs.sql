-- Meeting prep briefs the copilot posts on its own (issue 22).
--
-- brief_settings: a rep's opt-in (`brief on|off`, said in the rep's 1:1 chat); no row means
-- off. reference is that 1:1 chat's conversation reference: where the timer posts.
-- brief_claims: one row per (tenant, rep, meeting) a brief was claimed for. The timer claims
-- with INSERT … ON CONFLICT DO NOTHING before posting, so scaled-out instances and timer
-- retries post one brief per meeting per rep (as the write claims do). activity_id records
-- the posted message once it is sent.

CREATE TABLE brief_settings (
    tenant_id      text NOT NULL,
    aad_object_id  text NOT NULL,
    enabled        boolean NOT NULL,
    reference      jsonb NOT NULL,
    updated_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (tenant_id, aad_object_id)
);

CREATE TABLE brief_claims (
    tenant_id      text NOT NULL,
    aad_object_id  text NOT NULL,
    meeting_id     text NOT NULL,
    claimed_at     timestamptz NOT NULL DEFAULT now(),
    activity_id    text,
    PRIMARY KEY (tenant_id, aad_object_id, meeting_id)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON brief_settings, brief_claims TO copilot_app;
