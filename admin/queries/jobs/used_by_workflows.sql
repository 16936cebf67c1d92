-- Workflows with a node running job $1, and running workflow runs whose nodes (as they fired)
-- include it: at most 5, as (id, what it is called).
(SELECT id, 'workflow ' || id || ' (' || to_jsonb(name)::text || ')' AS what
 FROM workflows
 WHERE nodes @> jsonb_build_array(jsonb_build_object('job_id', $1::bigint))
 ORDER BY id
 LIMIT 5)
UNION ALL
(SELECT id, 'running workflow run ' || id AS what
 FROM workflow_runs
 WHERE status = 'running'
   AND nodes @> jsonb_build_array(jsonb_build_object('job_id', $1::bigint))
 ORDER BY id
 LIMIT 5)
LIMIT 5
