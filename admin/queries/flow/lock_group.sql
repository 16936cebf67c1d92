-- The group behind queue key `g:<name>` ($1: the name), locked for one release round: its
-- limit and rate, and the times of its recent releases.
SELECT "limit"::bigint AS "limit", rate_per_second, rate_burst::bigint AS rate_burst,
       released_recent, now() AS db_now
FROM concurrency_groups
WHERE name = $1
FOR UPDATE
