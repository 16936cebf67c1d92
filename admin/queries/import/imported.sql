-- The jobs already imported from source $1 among the XXL-JOB ids $2, with their job type.
SELECT m.xxl_job_id, m.job_id, j.job_type
FROM xxl_imports m
JOIN jobs j ON j.id = m.job_id
WHERE m.source = $1 AND m.xxl_job_id = ANY($2::bigint[])
