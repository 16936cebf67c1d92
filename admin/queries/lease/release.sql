-- Hand shards back: they expire now, so another admin takes them at its next round (and waits
-- the margin before reading back anything this admin might still have in flight).
UPDATE scheduler_lease
SET expires_at = LEAST(expires_at, now())
WHERE holder = $1 AND shard = ANY($2::int[])
