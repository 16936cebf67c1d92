-- Acquire or renew shards for $1 (the admin id) with TTL $2 ms, on the database clock.
-- A shard is taken when it is free or expired, and renewed when this admin still holds it;
-- every change of holder (or a re-take after expiry) increments the epoch.
UPDATE scheduler_lease
SET holder = $1,
    epoch = CASE WHEN holder = $1 AND expires_at > now() THEN epoch ELSE epoch + 1 END,
    expires_at = now() + make_interval(secs => $2::float8 / 1000.0)
WHERE shard = ANY($3::int[])
  AND ((holder = $1 AND expires_at > now()) OR holder IS NULL OR expires_at <= now())
RETURNING shard, epoch
