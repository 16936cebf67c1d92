-- Counts closed spans of skipped fire times ($1 job, $2 job type, $3 first fire time, $4 how
-- many) in both daily reports, on the UTC day of each span's first fire time (a span never
-- crosses a day); upserts in key order, as report/count_ended does.
WITH s AS (
    SELECT (first_fire AT TIME ZONE 'UTC')::date AS day, job_id, job_type, count
    FROM UNNEST($1::bigint[], $2::text[], $3::timestamptz[], $4::bigint[])
         AS s (job_id, job_type, first_fire, count)
),
by_job AS (
    INSERT INTO daily_report (day, job_id, status, runs)
    SELECT day, job_id, 'misfired', sum(count) FROM s GROUP BY 1, 2 ORDER BY 1, 2
    ON CONFLICT (day, job_id, status) DO UPDATE SET runs = daily_report.runs + EXCLUDED.runs
)
INSERT INTO daily_type_report (day, job_type, status, runs)
SELECT day, job_type, 'misfired', sum(count) FROM s GROUP BY 1, 2 ORDER BY 1, 2
ON CONFLICT (day, job_type, status) DO UPDATE SET runs = daily_type_report.runs + EXCLUDED.runs
