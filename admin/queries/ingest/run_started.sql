-- `started` events, batched. A run that already finished (or started) is left as it is.
UPDATE triggers t
SET status = 'running', worker_id = u.worker_id, worker_group = u.worker_group,
    partition = u.partition, "offset" = u.offset, attempt = u.attempt,
    started_at = u.started_at, updated_at = now()
FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::int[], $5::bigint[], $6::int[], $7::timestamptz[])
     AS u (id, worker_id, worker_group, partition, "offset", attempt, started_at)
WHERE t.id = u.id AND t.status IN ('scheduled', 'publishing', 'published')
