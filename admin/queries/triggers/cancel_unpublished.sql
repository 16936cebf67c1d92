-- Ends the run $1, not yet published, as cancelled by $2: the publisher claims only `scheduled`
-- runs, so it is never sent.
UPDATE triggers
SET status = 'cancelled', finished_at = now(), message = 'cancelled by ' || $2, updated_at = now()
WHERE id = $1 AND status = 'scheduled'
