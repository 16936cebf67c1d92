-- Workflow runs that ended more than $1 ms ago (their node runs are past the retention too, or
-- soon will be), at most $2 per round; their node rows go with them (ON DELETE CASCADE).
DELETE FROM workflow_runs
WHERE id IN (
    SELECT id FROM workflow_runs
    WHERE status <> 'running'
      AND finished_at < now() - make_interval(secs => $1::float8 / 1000.0)
    ORDER BY id
    LIMIT $2
)
