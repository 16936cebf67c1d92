-- A new workflow. Its shard is fixed from the new id: shard = id % shard_count ($1).
WITH new_id AS (SELECT nextval(pg_get_serial_sequence('workflows', 'id')) AS id)
INSERT INTO workflows (id, shard, name, schedule, schedule_kind, misfire, misfire_threshold_ms,
                       nodes, enabled, next_fire_at)
SELECT new_id.id, (new_id.id % $1)::int, $2, $3, $4, $5, $6, $7, $8, $9
FROM new_id
RETURNING id, name, schedule, misfire, misfire_threshold_ms, nodes, enabled, shard, next_fire_at,
          created_at, updated_at
