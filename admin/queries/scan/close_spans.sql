-- Closes the open spans of skipped fire times of the jobs $1 (claimed by this scan) into
-- `misfires`, as the jobs' strategy and threshold are now; scan/advance_jobs then starts them
-- afresh. Returns the spans closed, to count in the reports.
INSERT INTO misfires (job_id, job_type, first_fire, last_fire, count, strategy, threshold_ms)
SELECT id, job_type, misfire_first, misfire_last, misfire_count, misfire, misfire_threshold_ms
FROM jobs
WHERE id = ANY($1::bigint[]) AND misfire_count > 0
RETURNING job_id, job_type, first_fire, count
