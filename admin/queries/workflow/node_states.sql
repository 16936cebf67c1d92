-- Where every node of the workflow runs $1 stands.
SELECT workflow_run_id, node, status, run_id
FROM workflow_run_nodes
WHERE workflow_run_id = ANY($1::bigint[])
