-- Workflow $1, locked against the scan and other changes until the transaction ends (the scan
-- claims with FOR NO KEY UPDATE SKIP LOCKED and fires it in a later round).
SELECT id, name, schedule, misfire, misfire_threshold_ms, nodes, enabled, shard, next_fire_at,
       created_at, updated_at
FROM workflows
WHERE id = $1
FOR NO KEY UPDATE
