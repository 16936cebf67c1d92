-- Overdue `scheduled` runs of a schedule of the given shards, for the sweep to hand to the timer
-- (runs of a failed publication batch, or any the timer missed). The kinds are named as in the
-- predicate of triggers_scheduled (migration 0017), which holds only such runs: not the runs
-- written `publishing`, tens of thousands overdue when the publisher is behind, nor the dead
-- entries their records leave. Other kinds come with triggers/pending_requested.
SELECT id, job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms, attempt,
       shard_index, shard_total, route, requested_worker, workflow_run_id, workflow_node, upstream,
       released_at
FROM triggers
WHERE shard = ANY($1::int[]) AND status = 'scheduled'
  AND kind IN ('cron', 'fix_rate', 'fix_delay', 'once', 'misfire')
  AND fire_time <= now()
ORDER BY fire_time
