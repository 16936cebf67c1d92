SELECT job_type FROM job_types ORDER BY job_type
