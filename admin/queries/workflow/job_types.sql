-- The job types of the jobs $1 that exist.
SELECT id, job_type
FROM jobs
WHERE id = ANY($1::bigint[])
