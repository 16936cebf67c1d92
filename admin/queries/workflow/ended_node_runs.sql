-- Which of the runs $1 that just ended are runs of workflow nodes.
SELECT id, workflow_run_id, workflow_node
FROM triggers
WHERE id = ANY($1::bigint[]) AND workflow_run_id IS NOT NULL AND workflow_node IS NOT NULL
