SELECT id, name, schedule, misfire, misfire_threshold_ms, nodes, enabled, shard, next_fire_at,
       created_at, updated_at
FROM workflows
WHERE id = $1
