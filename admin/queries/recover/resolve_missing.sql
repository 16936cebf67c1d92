-- Runs not found on their partition during read-back never landed: send them again.
UPDATE triggers SET status = 'scheduled', updated_at = now()
WHERE id = ANY($1::bigint[]) AND status = 'publishing'
