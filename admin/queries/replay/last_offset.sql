-- The last offset of a trigger recorded as published on partition $2 of job type $1's topic: on a
-- run's row (a worker's event, or the read-back, wrote it there) or in the delivery record
-- (migration 0019), each read from its own index.
SELECT GREATEST(
    (SELECT max("offset") FROM triggers
     WHERE job_type = $1 AND partition = $2 AND "offset" IS NOT NULL),
    (SELECT max(last_offset) FROM deliveries WHERE job_type = $1 AND partition = $2))
