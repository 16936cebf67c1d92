-- Runs left `publishing` by a previous holder of these shards go back to `scheduled`.
UPDATE triggers SET status = 'scheduled', updated_at = now()
WHERE shard = ANY($1::int[]) AND status = 'publishing'
RETURNING id
