-- Remembers that XXL-JOB job $2 of source $1 became job $3.
INSERT INTO xxl_imports (source, xxl_job_id, job_id) VALUES ($1, $2, $3)
