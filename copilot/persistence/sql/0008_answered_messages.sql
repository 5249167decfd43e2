-- A message delivered twice (a queue redelivery after a worker died before acknowledging
-- it) is answered once: the runner records each named message a thread answered. The
-- thread's history alone cannot tell, since summarisation may have folded the message in.
CREATE TABLE answered_messages (
    thread_id    text NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    message_id   text NOT NULL,
    answered_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (thread_id, message_id)
);
GRANT SELECT, INSERT, DELETE ON answered_messages TO copilot_app;
