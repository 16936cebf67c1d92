-- Fire times job $1 has skipped in all (NULL when it does not exist or the caller may not see
-- its job type: $2 as in misfires/open).
SELECT misfired_total FROM jobs WHERE id = $1 AND ($2::text[] IS NULL OR job_type LIKE ANY($2))
