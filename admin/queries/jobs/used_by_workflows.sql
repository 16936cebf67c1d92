-- Workflows with a node running job $1 (at most 5, by id).
SELECT id, name
FROM workflows
WHERE nodes @> jsonb_build_array(jsonb_build_object('job_id', $1::bigint))
ORDER BY id
LIMIT 5
