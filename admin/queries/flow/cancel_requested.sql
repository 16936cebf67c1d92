-- The runs $1 were asked to cancel by the releaser (overlap policy cancel_other).
UPDATE triggers
SET cancel_requested_at = now(), updated_at = now(),
    message = 'cancel requested: a newer fire of the job replaces it (overlap policy cancel_other)'
WHERE id = ANY($1::bigint[])
