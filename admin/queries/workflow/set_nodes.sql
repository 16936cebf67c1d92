-- Where nodes of workflow run $1 stand now: status, latest run (kept when NULL), tries added,
-- message (replaced). Starting a node stamps started_at; ending it stamps finished_at.
UPDATE workflow_run_nodes n
SET status = u.status,
    run_id = COALESCE(u.run_id, n.run_id),
    tries = n.tries + u.add_try,
    message = u.message,
    started_at = CASE WHEN u.add_try > 0 THEN now() ELSE n.started_at END,
    finished_at = CASE WHEN u.status IN ('waiting', 'running') THEN NULL ELSE now() END,
    updated_at = now()
FROM UNNEST($2::text[], $3::text[], $4::bigint[], $5::int[], $6::text[])
     AS u (node, status, run_id, add_try, message)
WHERE n.workflow_run_id = $1 AND n.node = u.node
