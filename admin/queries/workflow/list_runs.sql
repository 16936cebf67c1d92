-- Workflow runs newest first, before id $3 (at most $4), filtered: $1 workflow, $2 status, $5 the
-- LIKE patterns of the job types the caller may see (NULL: all); a run is visible when every job
-- its nodes run that still exists is.
SELECT r.id, r.workflow_id, w.name AS workflow_name, r.kind, r.fire_time, r.status, r.nodes,
       r.message, r.requested_by, r.created_at, r.finished_at
FROM workflow_runs r
JOIN workflows w ON w.id = r.workflow_id
WHERE ($1::bigint IS NULL OR r.workflow_id = $1)
  AND ($2::text IS NULL OR r.status = $2)
  AND r.id < $3
  AND ($5::text[] IS NULL OR NOT EXISTS (
        SELECT 1
        FROM jsonb_array_elements(r.nodes) AS n (node)
        JOIN jobs j ON j.id = (n.node ->> 'job_id')::bigint
        WHERE NOT (j.job_type LIKE ANY($5::text[]))))
ORDER BY r.id DESC
LIMIT $4
