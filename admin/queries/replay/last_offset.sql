-- The last offset of a trigger recorded as published on partition $2 of job type $1's topic.
SELECT max("offset") FROM triggers WHERE job_type = $1 AND partition = $2 AND "offset" IS NOT NULL
