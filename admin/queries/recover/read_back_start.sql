-- Where to start reading a partition back: after the last trigger acknowledged on it before the
-- earliest of the unresolved runs was marked `publishing` (anything those sends wrote lands after).
SELECT max("offset") + 1
FROM triggers
WHERE job_type = $1 AND partition = $2 AND "offset" IS NOT NULL AND published_at < $3
