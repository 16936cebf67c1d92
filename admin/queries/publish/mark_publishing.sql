-- Ledger before send: claim scheduled rows for publication with the partition each goes to,
-- only while $1 holds the row's shard at the given epoch.
UPDATE triggers t
SET status = 'publishing', partition = u.partition, routed_worker = u.routed_worker,
    lease_epoch = u.epoch, updated_at = now()
FROM UNNEST($2::bigint[], $3::int[], $4::text[], $5::bigint[]) AS u (id, partition, routed_worker, epoch),
     scheduler_lease l
WHERE t.id = u.id
  AND t.status = 'scheduled'
  AND l.shard = t.shard AND l.holder = $1 AND l.epoch = u.epoch AND l.expires_at > now()
RETURNING t.id
