-- The run $1 to cancel, locked so that it cannot be published, started or ended meanwhile.
SELECT status, job_id, job_type, partition FROM triggers WHERE id = $1 FOR UPDATE
