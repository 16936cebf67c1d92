-- Workflows by id after $1 (at most $2), filtered: $3 enabled, $4 a part of the name (any case),
-- $5 the LIKE patterns of the job types the caller may see (NULL: all); a workflow is visible
-- when every job its nodes run that still exists is.
SELECT w.id, w.name, w.schedule, w.misfire, w.misfire_threshold_ms, w.nodes, w.enabled, w.shard,
       w.next_fire_at, w.created_at, w.updated_at
FROM workflows w
WHERE w.id > $1
  AND ($3::bool IS NULL OR w.enabled = $3)
  AND ($4::text IS NULL OR strpos(lower(w.name), lower($4)) > 0)
  AND ($5::text[] IS NULL OR NOT EXISTS (
        SELECT 1
        FROM jsonb_array_elements(w.nodes) AS n (node)
        JOIN jobs j ON j.id = (n.node ->> 'job_id')::bigint
        WHERE NOT (j.job_type LIKE ANY($5::text[]))))
ORDER BY w.id
LIMIT $2
