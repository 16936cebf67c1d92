-- Ends the runs $1 that are not yet published as cancelled, with message $2: the publisher
-- claims only `scheduled` runs, and queued ones are released as `scheduled` first, so they are
-- never sent. Returns the runs it ended.
UPDATE triggers
SET status = 'cancelled', finished_at = now(), message = $2, updated_at = now()
WHERE id = ANY($1::bigint[]) AND status IN ('scheduled', 'queued')
RETURNING id
