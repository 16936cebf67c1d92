-- Hand shards back at shutdown so another admin takes them at once.
UPDATE scheduler_lease
SET holder = NULL, expires_at = '-infinity'
WHERE holder = $1 AND shard = ANY($2::int[])
