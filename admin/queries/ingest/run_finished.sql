-- `finished` events, batched (at most one per run). The first terminal status wins; a repeated
-- event changes nothing, and neither does a late result of an earlier attempt once a later
-- attempt of the run has started (it was redelivered and runs again elsewhere). Returns each
-- run that ended with its status, kind, whether it may set off child jobs (its job has
-- children, or it is a shard of a broadcast fire), and whether it is a workflow node's run.
-- A succeeded run keeps its handler's output ($13, JSON text). As for `started`, a run not
-- recorded `published` yet takes its published_at from here. An event without a log (a result
-- published again from a worker's progress record) keeps the log shipped while the run ran.
UPDATE triggers t
SET status = u.status, worker_id = u.worker_id, worker_group = u.worker_group,
    partition = u.partition, "offset" = u.offset, attempt = u.attempt,
    started_at = CASE WHEN u.attempt > t.attempt THEN u.started_at
                      ELSE COALESCE(t.started_at, u.started_at) END,
    finished_at = u.finished_at, published_at = COALESCE(t.published_at, u.published_at, now()),
    message = u.message, log = COALESCE(u.log, t.log), retry_requested = u.retry_requested,
    output = CASE WHEN u.status = 'succeeded' THEN u.output::jsonb END, updated_at = now()
FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::int[], $5::bigint[], $6::int[],
            $7::text[], $8::timestamptz[], $9::timestamptz[], $10::text[], $11::text[],
            $12::bool[], $13::text[], $14::timestamptz[])
     AS u (id, worker_id, worker_group, partition, "offset", attempt, status, started_at,
           finished_at, message, log, retry_requested, output, published_at)
WHERE t.id = u.id
  AND t.status NOT IN ('succeeded', 'failed', 'timed_out', 'discarded', 'cancelled', 'lost', 'misfired',
                       'skipped')
  AND u.attempt >= t.attempt
  -- As for `started`: a few attempts on at most.
  AND u.attempt <= t.attempt + 16
RETURNING t.id, t.status, t.kind,
          t.fire_group IS NOT NULL
          OR EXISTS (SELECT 1 FROM jobs j WHERE j.id = t.job_id AND j.children <> '{}') AS parent,
          t.workflow_run_id IS NOT NULL AS workflow
