-- A Teams conversation runs in a chain of threads: after an idle gap, or before a thread
-- nears its model-call limit, the next question opens a successor (copilot/rotation.py).
-- `rotated_to` names the successor (a turn on a rotated thread follows it); `lineage` is
-- the first thread of the chain, shared by all of them (the conversation's threads);
-- `checkpoints_cleared_at` says the runner deleted a rotated thread's checkpoints (nothing
-- was pending there), so the thread row stays only for its cards, answers and audit links.
ALTER TABLE threads
    ADD COLUMN rotated_to text REFERENCES threads (thread_id) ON DELETE SET NULL,
    ADD COLUMN lineage text,
    ADD COLUMN checkpoints_cleared_at timestamptz;
CREATE INDEX threads_lineage_idx ON threads (lineage) WHERE rotated_to IS NOT NULL AND checkpoints_cleared_at IS NULL;
