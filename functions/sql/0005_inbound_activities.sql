-- Teams retries a webhook it thinks timed out, with the same activity id. The first
-- delivery is queued; repeats are acknowledged and dropped, so a question is not answered
-- twice. Rows are pruned by the retention timer after a couple of days.
CREATE TABLE inbound_activities (
    channel_id       text NOT NULL,
    conversation_id  text NOT NULL,
    activity_id      text NOT NULL,
    received_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (channel_id, conversation_id, activity_id)
);
CREATE INDEX inbound_activities_received_idx ON inbound_activities (received_at);

GRANT SELECT, INSERT, DELETE ON inbound_activities TO copilot_app;
