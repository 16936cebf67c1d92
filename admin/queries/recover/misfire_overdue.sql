-- Scheduled runs of the given shards found later than their job's misfire threshold follow the
-- job's misfire strategy: do_nothing records them all `misfired`; fire_once_now keeps the latest
-- of each job and records the others; fire_all keeps them all. API runs never misfire.
WITH overdue AS (
    SELECT t.id, j.misfire, j.misfire_threshold_ms,
           row_number() OVER (PARTITION BY t.job_id, t.shard_index ORDER BY t.fire_time DESC) AS newest
    FROM triggers t
    JOIN jobs j ON j.id = t.job_id
    WHERE t.shard = ANY($1::int[])
      AND t.status = 'scheduled'
      AND t.kind IN ('cron', 'fix_rate', 'fix_delay', 'once', 'misfire')
      -- A run released from a queue counts from its release.
      AND COALESCE(t.released_at, t.fire_time)
          < now() - make_interval(secs => j.misfire_threshold_ms / 1000.0)
)
UPDATE triggers t
SET status = 'misfired', finished_at = now(), updated_at = now(),
    message = 'missed its fire time by more than the misfire threshold (' || o.misfire_threshold_ms
              || ' ms) while no admin could publish it; misfire strategy ' || o.misfire
FROM overdue o
WHERE t.id = o.id
  -- Again here: a run the publisher marked `publishing` meanwhile keeps that status.
  AND t.status = 'scheduled'
  AND (o.misfire = 'do_nothing' OR (o.misfire = 'fire_once_now' AND o.newest > 1))
RETURNING t.id
