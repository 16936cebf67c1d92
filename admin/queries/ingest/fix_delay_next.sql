-- A fix_delay job fires again delay_ms after its own run finished: for the terminal runs among
-- $1 that are the job's own fires (kind fix_delay, or misfire when fire_once_now fired it late)
-- or retries of one, and are not being retried ($2: runs just retried; the retry's end counts
-- instead). A retry of a manual, API, child or replay run does not count. A misfired run has
-- finished_at = now(): the job then fires its delay after now.
WITH RECURSIVE ended AS (
    SELECT id, job_id, kind, parent_id, COALESCE(finished_at, now()) AS finished_at
    FROM triggers
    WHERE id = ANY($1::bigint[])
      AND kind IN ('fix_delay', 'misfire', 'retry')
      AND NOT (id = ANY($2::bigint[]))
),
-- Up the retry chain (parent_id) to the run that was retried first.
origin (run, up, kind) AS (
    SELECT id, parent_id, kind FROM ended
    UNION ALL
    SELECT o.run, t.parent_id, t.kind
    FROM origin o
    JOIN triggers t ON t.id = o.up
    WHERE o.kind = 'retry'
),
own AS (
    SELECT e.job_id, max(e.finished_at) AS finished_at
    FROM ended e
    JOIN origin o ON o.run = e.id AND o.kind IN ('fix_delay', 'misfire')
    GROUP BY e.job_id
)
UPDATE jobs j
SET next_fire_at = u.finished_at + make_interval(secs => (j.schedule->>'delay_ms')::float8 / 1000.0),
    updated_at = now()
FROM own u
WHERE j.id = u.job_id AND j.schedule_kind = 'fix_delay' AND j.enabled AND j.next_fire_at IS NULL
