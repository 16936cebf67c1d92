-- Move each claimed job's next_fire_at past what was just written; `once` jobs disable themselves.
-- The fire times the scan skipped ($4 first, $5 last, $6 how many) go into the job's open span
-- of skipped fire times, which starts afresh where $7 says the span was closed (by
-- scan/close_spans, just before).
UPDATE jobs
SET next_fire_at = u.next_fire_at,
    enabled = u.enabled,
    updated_at = now(),
    misfire_first = CASE WHEN u.close OR jobs.misfire_count = 0 THEN u.skip_first
                         ELSE jobs.misfire_first END,
    misfire_last = CASE WHEN u.skip_count > 0 THEN u.skip_last
                        WHEN u.close THEN NULL
                        ELSE jobs.misfire_last END,
    misfire_count = CASE WHEN u.close THEN 0 ELSE jobs.misfire_count END + u.skip_count,
    misfired_total = jobs.misfired_total + u.skip_count
FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bool[], $4::timestamptz[], $5::timestamptz[],
            $6::bigint[], $7::bool[])
     AS u (id, next_fire_at, enabled, skip_first, skip_last, skip_count, close)
WHERE jobs.id = u.id
