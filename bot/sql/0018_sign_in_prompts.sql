-- The sign-in card the brief timer posts to a rep the token service has no token for (issue 22).
--
-- One row per (tenant, rep, day) a card was claimed for: the timer claims with
-- INSERT … ON CONFLICT DO NOTHING before posting, so scaled-out instances and every later run
-- of the same day post no second card. A post that fails gives its claim back. expires_at is
-- the day after: retention removes the row then (bot/sql/data_map.json "expires").

CREATE TABLE sign_in_prompts (
    tenant_id      text NOT NULL,
    aad_object_id  text NOT NULL,
    day            date NOT NULL,
    claimed_at     timestamptz NOT NULL DEFAULT now(),
    activity_id    text,
    expires_at     timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, aad_object_id, day)
);

GRANT SELECT, INSERT, UPDATE, DELETE ON sign_in_prompts TO copilot_app;
