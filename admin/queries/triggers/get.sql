SELECT id, job_id, job_type, kind, status, fire_time, params, attempt, shard_index, shard_total,
       route, requested_worker, routed_worker, route_note, partition, "offset", published_at, worker_id,
       worker_group, started_at, finished_at, message, log, parent_id, retry_no, retry_requested,
       workflow_run_id, workflow_node, output, created_at
FROM triggers
WHERE id = $1
