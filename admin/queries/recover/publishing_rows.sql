-- Runs of the given shards (held at the given epochs) left `publishing`, to be resolved by reading
-- their partitions back: those marked, and due, more than $3 ms ago (their send has landed or
-- failed by now, whoever sent it: a run is sent at its fire time, and the scan marks a schedule's
-- runs when it writes them, ahead of it; the caller also leaves out runs still in its timer),
-- and — once the previous holders' sends have settled ($4) — every run marked under an earlier
-- epoch. A run this admin marked under its current epoch a moment ago is
-- never taken: its send is still in flight.
SELECT t.id, t.job_type, t.partition, t.lease_epoch, t.updated_at
FROM triggers t
JOIN UNNEST($1::int[], $2::bigint[]) AS mine (shard, epoch) ON mine.shard = t.shard
WHERE t.status = 'publishing'
  AND (GREATEST(t.updated_at, t.fire_time) < now() - make_interval(secs => $3::float8 / 1000.0)
       OR ($4 AND (t.lease_epoch IS NULL OR t.lease_epoch < mine.epoch)))
ORDER BY t.id
LIMIT 10000
