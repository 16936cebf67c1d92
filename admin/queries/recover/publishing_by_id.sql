-- Of the runs $1, which this admin marked `publishing` and whose delivery it has not recorded
-- (their send failed, or recording it did), those still `publishing`, not in the delivery record,
-- and marked and due more than $2 ms ago (their send has landed or failed by now): to be
-- resolved by reading their partitions back; only those of the shards $3 (held, being read
-- back). The caller leaves out runs still in its timer.
SELECT t.id, t.job_type, t.partition, t.lease_epoch, t.updated_at
FROM triggers t
WHERE t.id = ANY($1::bigint[]) AND t.status = 'publishing' AND t.shard = ANY($3::int[])
  AND GREATEST(t.updated_at, t.fire_time) < now() - make_interval(secs => $2::float8 / 1000.0)
  AND t.id NOT IN (SELECT cadenza_delivered_among($1::bigint[]))
ORDER BY t.updated_at
LIMIT 10000
