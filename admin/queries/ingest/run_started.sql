-- `started` events, batched (at most one per run). A run not started yet becomes `running`; a
-- run still `running` under an earlier attempt (it was redelivered after its worker stopped)
-- takes the new attempt's worker, start and (empty) live log. A run that already finished, or
-- that runs this attempt or a later one, is left as it is. A run the publisher has not recorded
-- `published` yet (it does so a moment after delivery, for runs no worker started meanwhile)
-- takes its partition, offset and published_at (the trigger record's, which the worker passes
-- on; when it does not, the time the admin learned of the delivery) from here.
UPDATE triggers t
SET status = 'running', worker_id = u.worker_id, worker_group = u.worker_group,
    partition = u.partition, "offset" = u.offset, attempt = u.attempt,
    started_at = u.started_at, published_at = COALESCE(t.published_at, u.published_at, now()),
    log = CASE WHEN t.status = 'running' THEN NULL ELSE t.log END,
    log_seq = CASE WHEN t.status = 'running' THEN 0 ELSE t.log_seq END,
    updated_at = now()
FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::int[], $5::bigint[], $6::int[], $7::timestamptz[],
            $8::timestamptz[])
     AS u (id, worker_id, worker_group, partition, "offset", attempt, started_at, published_at)
WHERE t.id = u.id
  AND (t.status IN ('scheduled', 'publishing', 'published')
       OR (t.status = 'running' AND t.attempt < u.attempt))
  -- A redelivery is a few attempts on at most: an event claiming many more (forged) changes
  -- nothing, and cannot shut out the run's real results.
  AND u.attempt <= t.attempt + 16
