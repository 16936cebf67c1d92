-- The earliest settled mark of all shards (migration 0019): every run still `publishing` marked
-- before it has its delivery recorded, or was resolved. NULL while some shard has none yet.
SELECT NULLIF(min(settled_before), '-infinity') FROM scheduler_lease
