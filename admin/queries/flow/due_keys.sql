-- The queue keys with a queued run due now whose release falls to the holder of the given
-- shards ($1): concurrency groups of those shards, and jobs of those shards that belong to no
-- group and whose overlap policy is not `allow`. A key with no group or job behind it any more
-- (the group was deleted after its jobs left it) goes with the shard of its runs.
SELECT 'g:' || g.name AS key
FROM concurrency_groups g
WHERE g.shard = ANY($1::int[])
  AND EXISTS (SELECT 1 FROM triggers t
              WHERE t.queue_key = 'g:' || g.name AND t.status = 'queued' AND t.fire_time <= now())
UNION ALL
SELECT 'j:' || j.id
FROM jobs j
WHERE j.overlap <> 'allow' AND j.concurrency_group IS NULL AND j.shard = ANY($1::int[])
  AND EXISTS (SELECT 1 FROM triggers t
              WHERE t.queue_key = 'j:' || j.id AND t.status = 'queued' AND t.fire_time <= now())
