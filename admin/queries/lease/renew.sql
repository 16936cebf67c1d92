-- Renew the shards this admin holds at the epochs it knows, before they expire.
UPDATE scheduler_lease l
SET expires_at = now() + make_interval(secs => $2::float8 / 1000.0)
FROM UNNEST($3::int[], $4::bigint[]) AS mine (shard, epoch)
WHERE l.shard = mine.shard AND l.epoch = mine.epoch AND l.holder = $1 AND l.expires_at > now()
RETURNING l.shard, l.epoch
