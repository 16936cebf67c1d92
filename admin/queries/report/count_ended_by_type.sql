-- Counts the runs $1, which just reached a terminal status in this transaction, in the report by
-- job type: one upsert per day, job type and status, in key order (no deadlock between batches).
-- Returns how many runs of each job type and status ended (for the metrics, once committed).
WITH ended AS (
    SELECT (fire_time AT TIME ZONE 'UTC')::date AS day, job_type, status, count(*) AS runs
    FROM triggers
    WHERE id = ANY($1::bigint[])
    GROUP BY 1, 2, 3
    ORDER BY 1, 2, 3
), counted AS (
    INSERT INTO daily_type_report (day, job_type, status, runs)
    SELECT day, job_type, status, runs FROM ended
    ON CONFLICT (day, job_type, status) DO UPDATE SET runs = daily_type_report.runs + EXCLUDED.runs
)
SELECT job_type, status, sum(runs)::bigint FROM ended GROUP BY 1, 2
