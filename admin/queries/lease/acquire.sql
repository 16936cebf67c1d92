-- Take up to $3 shards that are free or expired (an expired shard of this admin too: it is
-- re-taken with a new epoch). Returns each shard's new epoch and when the previous lease ended,
-- so the new holder knows how long to wait before reading back what the old one may have sent.
WITH pick AS (
    SELECT shard, GREATEST(expires_at, 'epoch') AS previous_expiry
    FROM scheduler_lease
    WHERE holder IS NULL OR expires_at <= now()
    ORDER BY shard
    LIMIT $3
    FOR UPDATE SKIP LOCKED
)
UPDATE scheduler_lease l
SET holder = $1, epoch = l.epoch + 1,
    expires_at = now() + make_interval(secs => $2::float8 / 1000.0)
FROM pick
WHERE l.shard = pick.shard
RETURNING l.shard, l.epoch, pick.previous_expiry, now() AS db_now
