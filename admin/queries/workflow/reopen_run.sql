-- Workflow run $1 runs again after an operator's action on one of its nodes.
UPDATE workflow_runs
SET status = 'running', finished_at = NULL, message = $2, updated_at = now()
WHERE id = $1
