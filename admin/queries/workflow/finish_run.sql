-- Workflow run $1 ends with status $2 (and message $3).
UPDATE workflow_runs
SET status = $2, message = COALESCE($3, message), finished_at = now(), updated_at = now()
WHERE id = $1
