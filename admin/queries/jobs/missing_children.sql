-- The ids in $1 that are not jobs.
SELECT c FROM UNNEST($1::bigint[]) AS c WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE id = c)
