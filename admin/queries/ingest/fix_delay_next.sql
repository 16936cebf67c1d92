-- A fix_delay job fires again delay_ms after its run finished: for the terminal runs among $1
-- of kind fix_delay (or a retry of one, or the run fired late by fire_once_now) that are not
-- being retried ($2: runs just retried; the retry's end counts instead). A misfired run has
-- finished_at = now(): the job then fires its delay after now.
UPDATE jobs j
SET next_fire_at = u.finished_at + make_interval(secs => (j.schedule->>'delay_ms')::float8 / 1000.0),
    updated_at = now()
FROM (
    SELECT job_id, max(COALESCE(finished_at, now())) AS finished_at
    FROM triggers
    WHERE id = ANY($1::bigint[])
      AND kind IN ('fix_delay', 'retry', 'misfire')
      AND NOT (id = ANY($2::bigint[]))
    GROUP BY job_id
) u
WHERE j.id = u.job_id AND j.schedule_kind = 'fix_delay' AND j.enabled AND j.next_fire_at IS NULL
