-- Take up to $3 shards that are free or expired (an expired shard of this admin too: it is
-- re-taken with a new epoch). Returns each shard's new epoch, when the previous lease ended (a
-- holder without transactions waits that plus the margin before reading back what the old one
-- may have sent), and the producers to fence first: those of every earlier holder that lost the
-- shard without handing it back ($4 is this admin's own, NULL without transactions).
WITH pick AS (
    SELECT shard, GREATEST(expires_at, 'epoch') AS previous_expiry,
           array_remove(array_remove(fence_txn_ids || txn_id, NULL), $4::text) AS to_fence
    FROM scheduler_lease
    WHERE holder IS NULL OR expires_at <= now()
    ORDER BY shard
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE scheduler_lease l
SET holder = $1, epoch = l.epoch + 1,
    expires_at = now() + make_interval(secs => $2::float8 / 1000.0),
    txn_id = $4::text,
    fence_txn_ids = pick.to_fence
FROM pick
WHERE l.shard = pick.shard
RETURNING l.shard, l.epoch, pick.previous_expiry, now() AS db_now, pick.to_fence
