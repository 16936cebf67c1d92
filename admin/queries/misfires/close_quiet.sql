-- Closes the open spans of skipped fire times that have been quiet for $1 ms (jobs the scan no
-- longer claims, or claims rarely), at most $2 of them, skipping jobs a scan holds; returns them
-- to count in the reports.
WITH quiet AS (
    SELECT id
    FROM jobs
    WHERE misfire_count > 0
      AND misfire_last < now() - make_interval(secs => $1::float8 / 1000.0)
    ORDER BY misfire_last
    LIMIT $2
    FOR NO KEY UPDATE SKIP LOCKED
),
closed AS (
    INSERT INTO misfires (job_id, job_type, first_fire, last_fire, count, strategy, threshold_ms)
    SELECT j.id, j.job_type, j.misfire_first, j.misfire_last, j.misfire_count, j.misfire,
           j.misfire_threshold_ms
    FROM jobs j
    JOIN quiet q ON q.id = j.id
    RETURNING job_id, job_type, first_fire, count
),
reset AS (
    UPDATE jobs
    SET misfire_first = NULL, misfire_last = NULL, misfire_count = 0
    FROM quiet q
    WHERE jobs.id = q.id
)
SELECT job_id, job_type, first_fire, count FROM closed
