-- Creates concurrency group $1 (limit $2, rate $3 a second with burst $4), released by the
-- holder of shard id % shard_count ($5); nothing when the name is taken.
WITH new_id AS (SELECT nextval(pg_get_serial_sequence('concurrency_groups', 'id')) AS id)
INSERT INTO concurrency_groups (id, name, "limit", rate_per_second, rate_burst, shard)
SELECT new_id.id, $1, $2, $3, $4, (new_id.id % $5)::int FROM new_id
ON CONFLICT (name) DO NOTHING
RETURNING name
