-- Move each claimed job's next_fire_at past what was just written; `once` jobs disable themselves.
-- The fire times the scan skipped ($4 first, $5 last, $6 how many) go into the job's open span
-- of skipped fire times; where $7 says so, the open span is closed first (into `misfires`, as
-- the job's strategy and threshold are now). Returns the spans closed, to count in the reports.
WITH u AS (
    SELECT *
    FROM UNNEST($1::bigint[], $2::timestamptz[], $3::bool[], $4::timestamptz[],
                $5::timestamptz[], $6::bigint[], $7::bool[])
         AS u (id, next_fire_at, enabled, skip_first, skip_last, skip_count, close)
),
closed AS (
    INSERT INTO misfires (job_id, job_type, first_fire, last_fire, count, strategy, threshold_ms)
    SELECT j.id, j.job_type, j.misfire_first, j.misfire_last, j.misfire_count, j.misfire,
           j.misfire_threshold_ms
    FROM jobs j
    JOIN u ON u.id = j.id
    WHERE u.close AND j.misfire_count > 0
    RETURNING job_id, job_type, first_fire, count
),
advanced AS (
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
    FROM u
    WHERE jobs.id = u.id
)
SELECT job_id, job_type, first_fire, count FROM closed
