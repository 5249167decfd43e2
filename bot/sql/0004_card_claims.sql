-- A double click sends two submissions of the same card; the first one to claim the card
-- decides it, the second is told it was already decided (the write itself is exactly-once
-- anyway: this keeps the rep from seeing the outcome twice). Works across instances.
ALTER TABLE approval_cards ADD COLUMN decided_at timestamptz;
