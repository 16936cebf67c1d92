SELECT id, job_id, job_type, kind, status, fire_time, params, attempt, shard_index, shard_total,
       route, requested_worker, routed_worker, route_note, partition, "offset", published_at, worker_id,
       worker_group, started_at, finished_at, message, NULL::text AS log, parent_id, retry_no,
       retry_requested, workflow_run_id, workflow_node, NULL::jsonb AS output,
       created_at
FROM triggers
WHERE ($1::bigint IS NULL OR job_id = $1)
  AND ($2::text IS NULL OR status = $2)
  AND id < $3
  AND ($5::timestamptz IS NULL OR fire_time >= $5)
  AND ($6::timestamptz IS NULL OR fire_time < $6)
  AND ($7::text IS NULL OR kind = $7)
  AND ($8::text[] IS NULL OR job_type LIKE ANY($8))
ORDER BY id DESC
LIMIT $4
