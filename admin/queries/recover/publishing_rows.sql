-- Runs of the given shards left `publishing` for longer than $2 ms (their send either landed or
-- failed by now): to be resolved by reading their partitions back.
SELECT id, job_type, partition, updated_at
FROM triggers
WHERE shard = ANY($1::int[]) AND status = 'publishing'
  AND updated_at < now() - make_interval(secs => $2::float8 / 1000.0)
ORDER BY id
LIMIT 10000
