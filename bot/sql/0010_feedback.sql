-- Teams' feedback buttons on answers: which message was which thread's answer (so a
-- thumbs-up/down can be matched to it), and every feedback a rep gave, for evaluation.
-- Both go with their thread when retention deletes it.
-- An answer is found by its message id, or by the id of the stream it closed (Teams may name
-- either in the feedback's replyToId); message_id is always the answer message's own.
CREATE TABLE answers (
    conversation_id  text NOT NULL,
    activity_id      text NOT NULL,
    message_id       text NOT NULL,
    thread_id        text NOT NULL REFERENCES threads (thread_id) ON DELETE CASCADE,
    tenant_id        text NOT NULL,
    aad_object_id    text NOT NULL,
    run_id           text,
    sent_at          timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (conversation_id, activity_id)
);
CREATE INDEX answers_latest ON answers (conversation_id, tenant_id, aad_object_id, sent_at DESC);

CREATE TABLE answer_feedback (
    id               bigserial PRIMARY KEY,
    conversation_id  text NOT NULL,
    activity_id      text,
    thread_id        text REFERENCES threads (thread_id) ON DELETE CASCADE,
    tenant_id        text NOT NULL,
    aad_object_id    text NOT NULL,
    rating           text NOT NULL CHECK (rating IN ('like', 'dislike')),
    comment          text CHECK (char_length(comment) <= 4000),
    run_id           text,
    received_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX answer_feedback_by_answer ON answer_feedback (conversation_id, activity_id);

GRANT SELECT, INSERT, DELETE ON answers, answer_feedback TO copilot_app;
GRANT USAGE, SELECT ON SEQUENCE answer_feedback_id_seq TO copilot_app;
