-- The workflow runs $1, locked (in id order) while what they do next is decided.
SELECT id, workflow_id, status, nodes
FROM workflow_runs
WHERE id = ANY($1::bigint[])
ORDER BY id
FOR UPDATE
