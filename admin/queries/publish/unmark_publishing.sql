-- A send failed for sure (rejected before it could land): back to `scheduled` for another try.
UPDATE triggers SET status = 'scheduled', message = $2, updated_at = now()
WHERE id = ANY($1::bigint[]) AND status = 'publishing'
