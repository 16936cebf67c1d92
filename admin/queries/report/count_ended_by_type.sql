-- Counts the runs $1, which just reached a terminal status in this transaction, in the report by
-- job type: one upsert per day, job type and status, in key order (no deadlock between batches).
INSERT INTO daily_type_report (day, job_type, status, runs)
SELECT (fire_time AT TIME ZONE 'UTC')::date, job_type, status, count(*)
FROM triggers
WHERE id = ANY($1::bigint[])
GROUP BY 1, 2, 3
ORDER BY 1, 2, 3
ON CONFLICT (day, job_type, status) DO UPDATE SET runs = daily_type_report.runs + EXCLUDED.runs
