-- `started` events of a later attempt of a run still `running` (it was redelivered after its
-- worker stopped): the new attempt's worker, start and (empty) live log replace the old ones.
UPDATE triggers t
SET worker_id = u.worker_id, worker_group = u.worker_group, partition = u.partition,
    "offset" = u.offset, attempt = u.attempt, started_at = u.started_at, log = NULL,
    log_seq = 0, updated_at = now()
FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::int[], $5::bigint[], $6::int[], $7::timestamptz[])
     AS u (id, worker_id, worker_group, partition, "offset", attempt, started_at)
WHERE t.id = u.id AND t.status = 'running' AND t.attempt < u.attempt
