-- Ledger before send: claim scheduled rows for publication with the partition each goes to,
-- only while $1 holds the row's shard at the given epoch. The selector leaves routed_worker
-- NULL exactly when no live worker served the job type: the run record says so in route_note.
UPDATE triggers t
SET status = 'publishing', partition = u.partition, routed_worker = u.routed_worker,
    route_note = CASE WHEN u.routed_worker IS NULL
                      THEN 'no live worker served job type ' || t.job_type || ' when it was published: sent to partition ' || u.partition || ' (the hash of the job id), where it waits for a consumer'
                 END,
    lease_epoch = u.epoch, updated_at = now()
FROM UNNEST($2::bigint[], $3::int[], $4::text[], $5::bigint[]) AS u (id, partition, routed_worker, epoch),
     scheduler_lease l
WHERE t.id = ANY($2::bigint[]) AND t.id = u.id
  AND t.status = 'scheduled'
  AND l.shard = t.shard AND l.holder = $1 AND l.epoch = u.epoch AND l.expires_at > now()
RETURNING t.id
