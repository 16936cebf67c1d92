SELECT r.id, r.workflow_id, w.name AS workflow_name, r.kind, r.fire_time, r.status, r.nodes,
       r.message, r.requested_by, r.created_at, r.finished_at
FROM workflow_runs r
JOIN workflows w ON w.id = r.workflow_id
WHERE r.id = $1
