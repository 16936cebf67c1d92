-- The job types of concurrency group $1's jobs.
SELECT DISTINCT job_type FROM jobs WHERE concurrency_group = $1 ORDER BY job_type
