-- The runs of key $1 in flight (released, not ended), per job.
SELECT job_id, count(*) AS runs
FROM triggers
WHERE queue_key = $1 AND status IN ('scheduled', 'publishing', 'published', 'running')
GROUP BY job_id
