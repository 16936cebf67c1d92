-- Shards no admin holds right now (never taken, released, or their lease ran out).
SELECT shard FROM scheduler_lease WHERE holder IS NULL OR expires_at <= now() ORDER BY shard
