-- A fix_delay job fires again delay_ms after its run finished.
UPDATE jobs j
SET next_fire_at = u.finished_at + make_interval(secs => (j.schedule->>'delay_ms')::float8 / 1000.0),
    updated_at = now()
FROM UNNEST($1::bigint[], $2::timestamptz[]) AS u (job_id, finished_at)
WHERE j.id = u.job_id AND j.schedule_kind = 'fix_delay' AND j.enabled AND j.next_fire_at IS NULL
