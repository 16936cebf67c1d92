-- Ends the runs $1 that are not yet published as cancelled, with message $2 (a workflow run was
-- cancelled): the publisher claims only `scheduled` runs, so they are never sent. Returns them.
UPDATE triggers
SET status = 'cancelled', finished_at = now(), message = $2, updated_at = now()
WHERE id = ANY($1::bigint[]) AND status = 'scheduled'
RETURNING id
