-- Queued runs of a schedule in key $1 that have waited longer than their job's misfire
-- threshold follow its misfire strategy, so that a queue cannot grow without bound:
-- do_nothing records each `misfired`; fire_once_now keeps the latest of each job and broadcast
-- shard and records the others; fire_all keeps them all. Runs that are not of a schedule (API
-- and manual triggers, retries, child runs, workflow nodes) wait however long it takes.
WITH late AS (
    SELECT t.id, j.misfire, j.misfire_threshold_ms,
           row_number() OVER (PARTITION BY t.job_id, t.shard_index ORDER BY t.fire_time DESC)
               AS newest
    FROM triggers t
    JOIN jobs j ON j.id = t.job_id
    WHERE t.queue_key = $1
      AND t.status = 'queued'
      AND t.kind IN ('cron', 'fix_rate', 'fix_delay', 'once', 'misfire')
      AND t.fire_time < now() - make_interval(secs => j.misfire_threshold_ms / 1000.0)
)
UPDATE triggers t
SET status = 'misfired', finished_at = now(), updated_at = now(),
    message = 'waited in its queue (' || t.queue_key || ') longer than the misfire threshold ('
              || l.misfire_threshold_ms || ' ms); misfire strategy ' || l.misfire
FROM late l
WHERE t.id = l.id
  AND (l.misfire = 'do_nothing' OR (l.misfire = 'fire_once_now' AND l.newest > 1))
RETURNING t.id
