-- Replaces workflow $1's definition (runs already fired keep the nodes they fired with).
UPDATE workflows
SET name = $2, schedule = $3, schedule_kind = $4, misfire = $5, misfire_threshold_ms = $6,
    nodes = $7, enabled = $8, next_fire_at = $9, updated_at = now()
WHERE id = $1
RETURNING id, name, schedule, misfire, misfire_threshold_ms, nodes, enabled, shard, next_fire_at,
          created_at, updated_at
