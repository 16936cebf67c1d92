-- The runs run $1 caused (its retry, the runs of its children), oldest first.
SELECT id, job_id, kind, status FROM triggers WHERE parent_id = $1 ORDER BY id LIMIT 1000
